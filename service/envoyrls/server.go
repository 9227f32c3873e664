package envoyrls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/ratelimitfields"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/internal/badrequest"
	"github.com/sluicehq/sluice/service/rules"
)

// Decider decides the descriptors of one Envoy request, all or nothing.
// *engine.Engine is the Decider ratelimitd serves.
type Decider interface {
	Descriptors(ctx context.Context, domain string, ds []engine.Descriptor) (engine.DescriptorsResult, error)
}

// MaxDescriptors bounds the descriptors of one request: a request with more
// is answered INVALID_ARGUMENT (Envoy's route actions produce a handful).
const MaxDescriptors = 256

// Server answers Envoy's envoy.service.ratelimit.v3.RateLimitService on a
// Decider. It is safe for concurrent use. Build one with New.
type Server struct {
	rlsv3.UnimplementedRateLimitServiceServer

	decider   Decider
	log       *slog.Logger
	fields    ratelimitfields.Config
	formatter *engine.Formatter // of fields
	now       func() time.Time
}

// Option configures a Server.
type Option func(*Server)

// WithLogger sets the logger store failures are reported to (they never
// reach the client). The default is slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(s *Server) {
		if l != nil {
			s.log = l
		}
	}
}

// WithFields sets which rate-limit fields the response's
// response_headers_to_add carries. The default is the IETF RateLimit and
// RateLimit-Policy fields, plus Retry-After when the request is over limit:
// Envoy emits the X-RateLimit-* fields itself from the statuses when its
// filter's enable_x_ratelimit_headers is DRAFT_VERSION_03.
func WithFields(c ratelimitfields.Config) Option {
	return func(s *Server) { s.fields = c }
}

// New returns a Server deciding on d.
func New(d Decider, opts ...Option) *Server {
	s := &Server{
		decider: d,
		log:     slog.Default(),
		fields:  ratelimitfields.Config{Omit: ratelimitfields.XRateLimit | ratelimitfields.State},
		now:     time.Now,
	}
	for _, o := range opts {
		o(s)
	}
	s.formatter = engine.NewFormatter(s.fields)
	return s
}

// Register registers s on g as envoy.service.ratelimit.v3.RateLimitService.
func (s *Server) Register(g *grpc.Server) { rlsv3.RegisterRateLimitServiceServer(g, s) }

// ShouldRateLimit decides every descriptor of req all or nothing: when one
// is over its limit, none of the others consumes anything.
//
// The cost of a descriptor is its own hits_addend when set (0 peeks:
// nothing is consumed and the status says whether one more hit would pass),
// else the request's hits_addend, where 0 (unset) means 1, as Envoy sends.
// is_negative_hits gives the cost back instead (see engine.Descriptor). A
// descriptor no rule matches (one without entries or with an empty key
// included), and a domain no rule names, are OK with no current_limit, as
// envoyproxy/ratelimit answers; each status with a limit states what is left
// after the hits up to it (see engine.DescriptorResult) and the time until
// its window ends in whole seconds; an `unlimited` rule is OK
// with limit_remaining math.MaxUint32; a Deny rule (requests_per_unit: 0)
// is OVER_LIMIT, stated as 0 per its unit; a shadow rule that would deny is
// reported OK (it is counted, and never denies). The overall code is
// OVER_LIMIT when any status is. A request-supplied descriptor `limit` is
// ignored: the configured rule applies.
//
// Errors: INVALID_ARGUMENT naming the field, in its message and a
// google.rpc.BadRequest detail (domain, descriptors[i].entries,
// ...); a store failure is UNAVAILABLE with a generic message (its text is
// logged, never sent), so that Envoy's failure_mode_deny decides.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	m := new(callMemory)
	ds, fe := descriptors(req, m)
	if fe != nil {
		return nil, badrequest.Status([]*core.FieldError{fe}).Err()
	}
	res, err := s.decider.Descriptors(ctx, req.GetDomain(), ds)
	if err != nil {
		// its own variable: a pointer to fe would put fe on the heap on
		// every call, this one only on this path
		var invalid *core.FieldError
		if errors.Is(err, engine.ErrInvalid) && errors.As(err, &invalid) {
			return nil, badrequest.Status([]*core.FieldError{invalid}).Err()
		}
		if errors.Is(err, engine.ErrInvalid) {
			return nil, status.Error(codes.InvalidArgument, "invalid request")
		}
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		s.log.LogAttrs(ctx, slog.LevelError, "envoyrls: deciding descriptors failed",
			slog.String("domain", req.GetDomain()), slog.Int("descriptors", len(ds)), slog.Any("error", err))
		return nil, status.Error(codes.Unavailable, "rate limit decision unavailable")
	}
	return s.response(&res, m), nil
}

// descriptors translates req's descriptors into the engine's, which
// validates them (naming the field); only the uint64 cost, which the
// engine cannot see, and the count, before allocating, are checked here.
func descriptors(req *rlsv3.RateLimitRequest, m *callMemory) ([]engine.Descriptor, *core.FieldError) {
	in := req.GetDescriptors()
	if len(in) > MaxDescriptors {
		return nil, &core.FieldError{Field: "descriptors", Message: fmt.Sprintf("at most %d, got %d", MaxDescriptors, len(in))}
	}
	cost := int64(req.GetHitsAddend())
	if cost == 0 {
		cost = 1
	}
	n := 0
	for _, d := range in {
		n += len(d.GetEntries())
	}
	out, all := m.ds[:0], m.entries[:0]
	if len(in) > len(m.ds) {
		out = make([]engine.Descriptor, 0, len(in))
	}
	if n > len(m.entries) {
		all = make([]rules.Entry, 0, n) // one allocation for every descriptor's entries
	}
	out, all = out[:len(in)], all[:n]
	for i, d := range in {
		es := d.GetEntries()
		entries := all[:len(es):len(es)]
		all = all[len(es):]
		for j, e := range es {
			entries[j] = rules.Entry{Key: e.GetKey(), Value: e.GetValue()}
		}
		c := cost
		if h := d.GetHitsAddend(); h != nil {
			if h.GetValue() > math.MaxInt64 {
				return nil, &core.FieldError{Field: fmt.Sprintf("descriptors[%d].hits_addend", i), Message: fmt.Sprintf("%d is out of range", h.GetValue())}
			}
			c = int64(h.GetValue())
		}
		out[i] = engine.Descriptor{Entries: entries, Cost: c, Negative: d.GetIsNegativeHits()}
	}
	return out, nil
}

// response builds the RateLimitResponse of a decision.
func (s *Server) response(res *engine.DescriptorsResult, m *callMemory) *rlsv3.RateLimitResponse {
	out, blocks := m.response(len(res.Statuses))
	if !res.Allowed {
		out.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	var now time.Time
	for i := range res.Statuses {
		r := &res.Statuses[i]
		if r.Rule != nil && r.Result.At == 0 && now.IsZero() {
			now = s.now()
		}
		st := blocks[i].fill(r, now)
		out.Statuses[i] = st
		if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			out.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}
	d := &res.Decision
	name := engine.DegradedName(res.Degraded)
	if d.Limited() {
		at := s.now()
		if b := d.Bound(); b.At != 0 {
			at = time.UnixMicro(b.At)
		}
		f := s.formatter.Format(d, res.Degraded, at)
		out.ResponseHeadersToAdd = m.headers(f, name)
	}
	if name != "" {
		if !d.Limited() {
			out.ResponseHeadersToAdd = m.headers(ratelimitfields.Fields{}, name)
		}
		out.DynamicMetadata = &structpb.Struct{Fields: map[string]*structpb.Value{"degraded": structpb.NewStringValue(name)}}
	}
	return out
}

// What one call holds in its one allocation (see callMemory): an Envoy
// request has a descriptor or two, of a few entries, and its answer a few
// header fields.
const (
	smallResponse = 2 // descriptors, and statuses
	smallEntries  = 3 // entries of every descriptor
	smallHeaders  = 3 // header fields of the response
)

// callMemory is what one ShouldRateLimit needs, allocated together: the
// engine's descriptors and their entries, the response, its statuses'
// messages and its header messages, each for up to its small size above;
// a larger call makes what does not fit there in allocations of its own.
type callMemory struct {
	ds      [smallResponse]engine.Descriptor
	entries [smallEntries]rules.Entry
	resp    rlsv3.RateLimitResponse
	ptrs    [smallResponse]*rlsv3.RateLimitResponse_DescriptorStatus
	blocks  [smallResponse]statusBlock
	hvals   [smallHeaders]corev3.HeaderValue
	hptrs   [smallHeaders]*corev3.HeaderValue
}

// response returns an OK RateLimitResponse of n statuses and the blocks of
// their messages, in m for a few, in two allocations more for more.
func (m *callMemory) response(n int) (*rlsv3.RateLimitResponse, []statusBlock) {
	m.resp.OverallCode = rlsv3.RateLimitResponse_OK
	if n <= smallResponse {
		m.resp.Statuses = m.ptrs[:n]
		return &m.resp, m.blocks[:n]
	}
	m.resp.Statuses = make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)
	return &m.resp, make([]statusBlock, n)
}

// headers are the response headers of fields f, and of the failure mode
// named (none when ""), their messages in m for a few, in two allocations
// for more.
func (m *callMemory) headers(f ratelimitfields.Fields, degraded string) []*corev3.HeaderValue {
	n := f.N
	if degraded != "" {
		n++
	}
	if n == 0 {
		return nil
	}
	vals, out := m.hvals[:n:n], m.hptrs[:0:n]
	if n > smallHeaders {
		vals, out = make([]corev3.HeaderValue, n), make([]*corev3.HeaderValue, 0, n)
	}
	for name, value := range f.All() {
		v := &vals[len(out)]
		v.Key, v.Value = name.String(), value
		out = append(out, v)
	}
	if degraded != "" {
		v := &vals[len(out)]
		v.Key, v.Value = degradedHeader, degraded
		out = append(out, v)
	}
	return out
}

// degradedHeader is engine.DegradedHeader as Envoy sends header names: in
// lower case.
var degradedHeader = strings.ToLower(engine.DegradedHeader)

// statusBlock holds the messages of one descriptor's status, allocated
// together.
type statusBlock struct {
	status rlsv3.RateLimitResponse_DescriptorStatus
	limit  rlsv3.RateLimitResponse_RateLimit
	reset  durationpb.Duration
}

// fill makes b the status of r and returns it.
func (b *statusBlock) fill(r *engine.DescriptorResult, now time.Time) *rlsv3.RateLimitResponse_DescriptorStatus {
	descriptorStatus(r, now, &b.status, &b.limit, &b.reset)
	return &b.status
}

// descriptorStatus makes st the status of one descriptor: what Envoy
// needs to emit X-RateLimit-Limit, -Remaining and -Reset itself. now is
// read only when the store named no instant (a Deny rule, a guard's
// fallback); l and d become st's current_limit and duration_until_reset
// when the status has them.
func descriptorStatus(r *engine.DescriptorResult, now time.Time, st *rlsv3.RateLimitResponse_DescriptorStatus, l *rlsv3.RateLimitResponse_RateLimit, d *durationpb.Duration) {
	st.Code = rlsv3.RateLimitResponse_OK
	switch {
	case r.Unlimited:
		st.LimitRemaining = math.MaxUint32
		return
	case r.Rule == nil:
		return
	case r.Rule.Deny:
		denyStatus(r, now, l, d, st)
		return
	}
	p := &r.Result
	if !p.Allowed && !p.Shadow && !r.Rule.Shadow {
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	// The limit applied (a tier's, an override's, a fallback's share),
	// as core states it, whoever answered.
	perUnit, unit := EnvoyLimit(p.Limit.Rate, p.Limit.Period)
	l.Name, l.RequestsPerUnit, l.Unit = r.Rule.ID, perUnit, unit
	st.CurrentLimit = l
	if engine.Unchecked(p.Source) { // the guard answered: no counter was read
		switch {
		case st.Code != rlsv3.RateLimitResponse_OK:
			setSeconds(d, p.RetryAfter) // fail closed: when to try again
			st.DurationUntilReset = d
		default: // fail open counts nothing: the whole limit is left
			st.LimitRemaining = clampUint32(p.Capacity)
		}
		return
	}
	remaining := p.Remaining
	if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
		remaining = 0
	}
	setSeconds(d, untilReset(p, p.Limit, now))
	st.LimitRemaining, st.DurationUntilReset = clampUint32(remaining), d
}

// untilReset is a status's duration_until_reset: for a fixed window (every
// Envoy rule but those that name another algorithm) the time until the
// current window ends, windows aligned on the Unix epoch, whether or not
// the key has counted anything in it, as envoyproxy/ratelimit reports it
// (unit - now % unit); for the other algorithms the time until the key is
// fresh, and at least the rule's period when the descriptor is denied and
// the key is fresh (a cost above the capacity), so that a denial never
// says "retry now". The instant is the store's decision's (p.At), else
// now.
func untilReset(p *core.PolicyResult, limit core.Limit, now time.Time) time.Duration {
	at := p.At
	if at == 0 {
		at = now.UnixMicro()
	}
	if period := limit.Period.Microseconds(); limit.Algorithm == core.FixedWindow && period > 0 {
		into := at % period
		if into < 0 { // before the epoch
			into += period
		}
		return time.Duration(period-into) * time.Microsecond
	}
	if !p.Allowed && p.ResetAfter <= 0 {
		return limit.Period
	}
	return p.ResetAfter
}

// setSeconds makes d the Duration of t rounded up to whole seconds, as
// envoyproxy/ratelimit states every duration_until_reset (and never less
// than the wait: a client that waits d finds the window over); 0 when
// negative.
func setSeconds(d *durationpb.Duration, t time.Duration) {
	t = max(t, 0)
	d.Seconds, d.Nanos = int64((t+time.Second-1)/time.Second), 0
}

// denyStatus makes st the status of a Deny rule (Envoy's
// requests_per_unit: 0): OVER_LIMIT unless in shadow, stated as 0 per its
// unit as envoyproxy/ratelimit states it, with nothing remaining and the
// time until the unit's calendar window ends (the engine's ResetAfter when
// it gives one); l and d are st's limit and reset messages.
func denyStatus(r *engine.DescriptorResult, now time.Time, l *rlsv3.RateLimitResponse_RateLimit, d *durationpb.Duration, st *rlsv3.RateLimitResponse_DescriptorStatus) {
	st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	if r.Rule.Shadow || r.Result.Shadow {
		st.Code = rlsv3.RateLimitResponse_OK
	}
	period := r.Rule.Limit.Period
	unit := rlsv3.RateLimitResponse_RateLimit_UNKNOWN
	for _, u := range units {
		if u.size == period {
			unit = u.unit
		}
	}
	limit := r.Rule.Limit
	limit.Algorithm = core.FixedWindow // a ban's window is its unit's, aligned on the epoch
	l.Name, l.Unit = r.Rule.ID, unit
	setSeconds(d, untilReset(&r.Result, limit, now))
	st.CurrentLimit, st.DurationUntilReset = l, d
}
