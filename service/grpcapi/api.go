package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/adapters/grpclimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/fieldfmt"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/internal/badrequest"
	"github.com/sluicehq/sluice/service/ratelimitv1"
)

// Bounds on the request's strings, in bytes: the engine's (a check names
// a caller, it does not carry data).
const (
	maxIdentifier  = engine.MaxIdentifier
	maxDimension   = engine.MaxDimension
	maxEndpoint    = engine.MaxEndpoint
	maxRuleID      = engine.MaxRule
	maxIdempotency = engine.MaxIdempotencyKey
)

// errNotDecided is the error of a valid check of an all-or-nothing batch
// that another check's invalid input kept from being decided.
const errNotDecided = "not decided: another check of the all-or-nothing batch is invalid"

// CheckRateLimit decides one check (cost absent: 1; 0: a peek).
func (s *Server) CheckRateLimit(ctx context.Context, req *ratelimitv1.CheckRequest) (*ratelimitv1.CheckResponse, error) {
	c, bad := toCheck(req, true)
	if bad != nil {
		return nil, invalid(bad)
	}
	r, err := s.engine.Check(ctx, c)
	if err != nil {
		return nil, s.fail(ctx, "CheckRateLimit", "", err)
	}
	s.sendFields(ctx, &r)
	return new(response).fill(&r), nil
}

// GetRemainingQuota decides a peek of the check: nothing is consumed and
// the request's cost is ignored.
func (s *Server) GetRemainingQuota(ctx context.Context, req *ratelimitv1.CheckRequest) (*ratelimitv1.CheckResponse, error) {
	c, bad := toCheck(req, false)
	if bad != nil {
		return nil, invalid(bad)
	}
	c.Cost = 0
	c.IdempotencyKey = ""
	r, err := s.engine.Check(ctx, c)
	if err != nil {
		return nil, s.fail(ctx, "GetRemainingQuota", "", err)
	}
	s.sendFields(ctx, &r)
	return new(response).fill(&r), nil
}

// Report charges the cost of work already done (cost absent: 1): taken
// even beyond what is left, which then drains to 0; allowed is false when
// the cost did not fit.
func (s *Server) Report(ctx context.Context, req *ratelimitv1.CheckRequest) (*ratelimitv1.CheckResponse, error) {
	c, bad := toCheck(req, true)
	if bad != nil {
		return nil, invalid(bad)
	}
	r, err := s.engine.Report(ctx, c)
	if err != nil {
		return nil, s.fail(ctx, "Report", "", err)
	}
	s.sendFields(ctx, &r)
	return new(response).fill(&r), nil
}

// ResetLimit clears the identifier's counters of every matching rule.
func (s *Server) ResetLimit(ctx context.Context, req *ratelimitv1.ResetRequest) (*ratelimitv1.ResetResponse, error) {
	c := engine.Check{
		Identifier: req.GetIdentifier(),
		Dimension:  req.GetDimension(),
		Endpoint:   req.GetEndpoint(),
		Rule:       req.GetRuleId(),
	}
	if bad := checkNames(nil, c); bad != nil {
		return nil, invalid(bad)
	}
	var reset error
	rec := Reset{Target: "limit/" + c.Dimension + "/" + c.Identifier, After: resetAfter{Endpoint: c.Endpoint, RuleID: c.Rule}}
	err := s.record(ctx, rec, func(ctx context.Context) error {
		reset = s.engine.Reset(ctx, c)
		return reset
	})
	switch {
	case reset != nil:
		return nil, s.fail(ctx, "ResetLimit", "", reset)
	case err != nil:
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		s.log.ErrorContext(ctx, "ratelimitd: recording a ResetLimit failed", "target", rec.Target, "error", err)
		return nil, status.Error(codes.Unavailable, errUnrecorded)
	}
	return &ratelimitv1.ResetResponse{}, nil
}

// errUnrecorded is the only text a client gets when its ResetLimit could
// not be recorded.
const errUnrecorded = "the reset could not be audited; retry later"

// resetAfter is the request of a ResetLimit, in its record.
type resetAfter struct {
	Endpoint string `json:"endpoint"`
	RuleID   string `json:"rule_id,omitempty"`
}

// CheckRateLimitBatch decides the checks of req, each with its own result
// or error; with all_or_nothing, either all are admitted and charged or
// none is charged.
func (s *Server) CheckRateLimitBatch(ctx context.Context, req *ratelimitv1.BatchRequest) (*ratelimitv1.BatchResponse, error) {
	n := len(req.GetChecks())
	if n > s.maxBatch {
		return nil, invalid([]*core.FieldError{{Field: "checks", Message: fmt.Sprintf("at most %d checks in one batch, got %d", s.maxBatch, n)}})
	}
	sc, _ := s.batches.Get().(*batchScratch)
	if sc == nil {
		sc = new(batchScratch)
	}
	defer s.putBatch(sc)
	results := make([]*ratelimitv1.BatchResult, n)
	checks, index := slices.Grow(sc.checks[:0], n), slices.Grow(sc.index[:0], n)
	invalidSeen := false
	for i, cr := range req.GetChecks() {
		c, bad := toCheck(cr, true)
		if bad != nil {
			for j := range bad {
				bad[j] = bad[j].In(fmt.Sprintf("checks[%d]", i))
			}
			results[i] = errorResult(badrequest.Status(bad))
			invalidSeen = true
			continue
		}
		checks = append(checks, c)
		index = append(index, i)
	}
	sc.checks, sc.index = checks, index
	aon := req.GetAllOrNothing()
	if aon && invalidSeen {
		// nothing is decided: the batch stands or falls as a whole
		for _, i := range index {
			results[i] = errorResult(status.New(codes.Aborted, errNotDecided))
		}
		return &ratelimitv1.BatchResponse{Results: results}, nil
	}
	if len(checks) > 0 {
		s.batchResults(ctx, checks, index, aon, results)
	}
	return &ratelimitv1.BatchResponse{Results: results}, nil
}

// batchScratch is the memory of one CheckRateLimitBatch that its response
// does not keep, pooled: the engine's checks, and the request's index of
// each.
type batchScratch struct {
	checks []engine.Check
	index  []int // checks[j] is request check index[j]
}

// putBatch returns sc to the pool, keeping no identity.
func (s *Server) putBatch(sc *batchScratch) {
	clear(sc.checks)
	sc.checks, sc.index = sc.checks[:0], sc.index[:0]
	s.batches.Put(sc)
}

// batchResults decides checks (request checks index[j]) and writes each
// one's result to results, straight from the engine's answer: the
// messages of every admitted or denied check in one allocation (and the
// retry delays of the denied ones in another).
func (s *Server) batchResults(ctx context.Context, checks []engine.Check, index []int, aon bool, results []*ratelimitv1.BatchResult) {
	blocks := make([]batchBlock, len(checks))
	var retries []durationpb.Duration // of denied checks, allocated at the first
	logged := false                   // one store failure logged per batch, not one per check
	s.engine.CheckBatchFunc(ctx, checks, aon, func(j int, r *engine.Result, err error) {
		i := index[j]
		if err != nil {
			st, store := s.failStatus(ctx, fmt.Sprintf("checks[%d]", i), err)
			if store && !logged {
				logged = true
				s.log.ErrorContext(ctx, "ratelimitd: check failed", "method", "CheckRateLimitBatch", "error", err)
			}
			results[i] = errorResult(st)
			return
		}
		b := &blocks[j]
		if needsRetry(r) {
			if retries == nil {
				retries = make([]durationpb.Duration, len(checks))
			}
			b.msg.RetryAfter = setDuration(&retries[j], r.RetryAfter)
		}
		results[i] = b.fill(r)
	})
	for _, i := range index {
		if results[i] == nil { // the engine answers every check: never
			results[i] = errorResult(status.New(codes.Internal, "no result"))
		}
	}
}

// batchBlock holds the messages of one check's BatchResult but its retry
// delay (most checks are admitted: they have none).
type batchBlock struct {
	result  ratelimitv1.BatchResult
	outcome ratelimitv1.BatchResult_Response
	msg     ratelimitv1.CheckResponse
	reset   timestamppb.Timestamp
}

// fill makes b the result of r (its RetryAfter set by the caller) and
// returns it.
func (b *batchBlock) fill(r *engine.Result) *ratelimitv1.BatchResult {
	setResponse(&b.msg, &b.reset, r)
	b.outcome.Response = &b.msg
	b.result.Outcome = &b.outcome
	return &b.result
}

func errorResult(st *status.Status) *ratelimitv1.BatchResult {
	return &ratelimitv1.BatchResult{Outcome: &ratelimitv1.BatchResult_Error{Error: st.Proto()}}
}

// toCheck validates req and returns its engine.Check; withCost reads the
// cost (absent: 1). The errors name the request's fields.
func toCheck(req *ratelimitv1.CheckRequest, withCost bool) (engine.Check, []*core.FieldError) {
	c := engine.Check{
		Identifier:     req.GetIdentifier(),
		Dimension:      req.GetDimension(),
		Endpoint:       req.GetEndpoint(),
		Rule:           req.GetRuleId(),
		IdempotencyKey: req.GetIdempotencyKey(),
		Cost:           1,
	}
	bad := checkNames(nil, c)
	if len(c.IdempotencyKey) > maxIdempotency {
		bad = violation(bad, "idempotency_key", fmt.Sprintf("at most %d bytes", maxIdempotency))
	}
	if withCost && req.Cost != nil {
		c.Cost = req.GetCost()
		if c.Cost < 0 {
			bad = violation(bad, "cost", fmt.Sprintf("must not be negative, got %d", c.Cost))
		}
	}
	if ct := req.GetClientTime(); ct != nil {
		if err := ct.CheckValid(); err != nil {
			bad = violation(bad, "client_time", "not a valid timestamp")
		} else {
			c.ClientTime = ct.AsTime()
		}
	}
	return c, bad
}

// checkNames validates the names of c: identifier and dimension required,
// every name bounded.
func checkNames(bad []*core.FieldError, c engine.Check) []*core.FieldError {
	switch {
	case c.Identifier == "":
		bad = violation(bad, "identifier", "required")
	case len(c.Identifier) > maxIdentifier:
		bad = violation(bad, "identifier", fmt.Sprintf("at most %d bytes", maxIdentifier))
	}
	switch {
	case c.Dimension == "":
		bad = violation(bad, "dimension", "required")
	case len(c.Dimension) > maxDimension:
		bad = violation(bad, "dimension", fmt.Sprintf("at most %d bytes", maxDimension))
	}
	if len(c.Endpoint) > maxEndpoint {
		bad = violation(bad, "endpoint", fmt.Sprintf("at most %d bytes", maxEndpoint))
	}
	if len(c.Rule) > maxRuleID {
		bad = violation(bad, "rule_id", fmt.Sprintf("at most %d bytes", maxRuleID))
	}
	return bad
}

func violation(bad []*core.FieldError, field, msg string) []*core.FieldError {
	return append(bad, &core.FieldError{Field: field, Message: msg})
}

// invalid is INVALID_ARGUMENT naming the fields of bad (badrequest.Status).
func invalid(bad []*core.FieldError) error { return badrequest.Status(bad).Err() }

// fail maps an engine error: invalid input to INVALID_ARGUMENT naming the
// field (prefixed by prefix), the call's own end to its status, anything
// else (a store failure) to UNAVAILABLE with a generic message, the error
// itself logged only.
func (s *Server) fail(ctx context.Context, method, prefix string, err error) error {
	st, store := s.failStatus(ctx, prefix, err)
	if store {
		s.log.ErrorContext(ctx, "ratelimitd: check failed", "method", method, "error", err)
	}
	return st.Err()
}

// failStatus is fail's status; store is true for a store failure (to be
// logged by the caller). An invalid check's field is named as the request
// names it, under prefix ("checks[3]"; "" for none).
func (s *Server) failStatus(ctx context.Context, prefix string, err error) (st *status.Status, store bool) {
	var fe *core.FieldError
	switch {
	case errors.Is(err, engine.ErrInvalid) && errors.As(err, &fe) && fe.Field == "all_or_nothing":
		// a valid check of an all-or-nothing batch another check spoiled
		return status.New(codes.Aborted, errNotDecided), false
	case errors.Is(err, engine.ErrInvalid) && errors.As(err, &fe):
		return badrequest.Status([]*core.FieldError{requestField(fe).In(prefix)}), false
	case errors.Is(err, engine.ErrInvalid): // names no field
		return status.New(codes.InvalidArgument, "invalid request"), false
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		if ctx.Err() != nil {
			return status.FromContextError(ctx.Err()), false
		}
	}
	return status.New(codes.Unavailable, errStore.Error()), true
}

// engineFields maps the engine's names of Check's fields to the request's
// where they differ.
var engineFields = map[string]string{"rule": "rule_id"}

// requestField is fe, an invalid check's field, named as the request names
// it.
func requestField(fe *core.FieldError) *core.FieldError {
	if m, ok := engineFields[fe.Field]; ok {
		return &core.FieldError{Field: m, Message: fe.Message, Err: fe.Err}
	}
	return fe
}

// sendFields sets the rate-limit metadata of r's decision on the call's
// response header (nothing when there is none).
func (s *Server) sendFields(ctx context.Context, r *engine.Result) {
	if s.noFields {
		return
	}
	f := s.fields.Format(&r.Decision, r.Degraded, fieldfmt.DecidedAt(&r.Decision, s.now()))
	name := engine.DegradedName(r.Degraded)
	if f.N == 0 && name == "" {
		return
	}
	md := grpclimit.Metadata(f)
	if name != "" {
		md.Set(strings.ToLower(engine.DegradedHeader), name)
	}
	// the only error is a call that is not a gRPC server call (a direct
	// method call in a test): then there is no header to set
	_ = grpc.SetHeader(ctx, md)
}

// response is a CheckResponse and the messages it points to, allocated
// together.
type response struct {
	msg   ratelimitv1.CheckResponse
	reset timestamppb.Timestamp
	retry durationpb.Duration
}

// fill makes b's message r on the wire and returns it.
func (b *response) fill(r *engine.Result) *ratelimitv1.CheckResponse {
	setResponse(&b.msg, &b.reset, r)
	if needsRetry(r) {
		b.msg.RetryAfter = setDuration(&b.retry, r.RetryAfter)
	}
	return &b.msg
}

// setResponse makes m r on the wire, its reset_at in reset, but for its
// retry_after (see needsRetry).
func setResponse(m *ratelimitv1.CheckResponse, reset *timestamppb.Timestamp, r *engine.Result) {
	m.Allowed, m.Current, m.Limit, m.Remaining = r.Allowed, r.Used, r.Limit, r.Remaining
	m.State, m.Rule, m.Degraded = toState(r.State), r.Rule, toDegraded(r.Degraded)
	if !r.ResetAt.IsZero() {
		reset.Seconds, reset.Nanos = r.ResetAt.Unix(), int32(r.ResetAt.Nanosecond())
		m.ResetAt = reset
	}
	m.RetryNever = !r.Allowed && r.RetryAfter == core.RetryNever
}

// needsRetry reports whether r's message has a retry_after: denied, with a
// wait that ends.
func needsRetry(r *engine.Result) bool { return !r.Allowed && r.RetryAfter != core.RetryNever }

// setDuration makes d the wire form of v and returns it.
func setDuration(d *durationpb.Duration, v time.Duration) *durationpb.Duration {
	d.Seconds, d.Nanos = int64(v/time.Second), int32(v%time.Second)
	return d
}

// toDegraded is the wire form of a Result's Degraded.
func toDegraded(s core.Source) ratelimitv1.Degraded {
	switch s {
	case core.FailedOpen:
		return ratelimitv1.Degraded_DEGRADED_FAIL_OPEN
	case core.FailedClosed:
		return ratelimitv1.Degraded_DEGRADED_FAIL_CLOSED
	case core.FromFallback:
		return ratelimitv1.Degraded_DEGRADED_FALLBACK
	}
	return ratelimitv1.Degraded_DEGRADED_NONE
}

func toState(st core.State) ratelimitv1.State {
	switch st {
	case core.Normal:
		return ratelimitv1.State_STATE_NORMAL
	case core.Warning:
		return ratelimitv1.State_STATE_WARNING
	case core.Throttled:
		return ratelimitv1.State_STATE_THROTTLED
	}
	return ratelimitv1.State_STATE_UNSPECIFIED
}
