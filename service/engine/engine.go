// Package engine decides ratelimitd's checks: every front door (the native
// gRPC API, Envoy's rate-limit protocol, the HTTP JSON API) translates its
// request into a Check or a Descriptors call on one Engine, which matches
// it against the current rules snapshot once and decides the rules that
// apply in one call of a core.Limiter built from that snapshot, over one
// store. None of the front doors decides anything itself.
package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/service/rules"
)

// Check is one question to the engine: may identifier, of the given
// dimension, spend cost units on endpoint now?
type Check struct {
	// Dimension names what Identifier is: "user", "ip", "api_key" or any
	// name a rule uses. Required.
	Dimension string
	// Identifier is the caller counted: a user id, an address, a key.
	// Required.
	Identifier string
	// Endpoint is the operation called ("/api/v1/orders"); rules match it
	// by their endpoint patterns. Empty matches only rules for every
	// endpoint.
	Endpoint string
	// Rule, when set, decides the check under that rule only (the HTTP
	// API's rule_id); it must exist and its dimension must be Dimension.
	Rule string
	// Cost is how many units the check takes: 0 peeks (nothing consumed).
	// Negative is invalid.
	Cost int64
	// IdempotencyKey, when set, makes a repeat of an admitted check with the
	// same key and fields free (within the engine's idempotency TTL and
	// repeat bound): a retried call is not counted twice.
	IdempotencyKey string
	// ClientTime is the caller's clock when it made the call, or the zero
	// Time. It is a bounded hint only (reported skew, never the clock the
	// decision is made on).
	ClientTime time.Time
}

// Result is the engine's answer to one Check.
type Result struct {
	// Allowed is false when a rule (not in shadow) denied the check.
	Allowed bool
	// Rule is the rule that decided: the denying one, or the one closest
	// to its limit; empty when no rule applies (the check is allowed and
	// nothing is counted).
	Rule string
	// Limit is the binding rule's capacity: the limit applied (a tier's, an
	// override's, or in fallback the local share of one), read from its
	// core.PolicyResult, whoever answered; Used is Limit - Remaining.
	Limit, Remaining, Used int64
	// ResetAt is when the binding rule's key is fresh again; RetryAfter,
	// when denied, is the wait until a check of the same cost passes
	// (core.RetryNever: never).
	ResetAt    time.Time
	RetryAfter time.Duration
	// State is the binding key's warning state (Normal, Warning above 80%
	// usage, Throttled when denied).
	State core.State
	// Degraded is core.FromStore when the store decided; otherwise the
	// guard's failure mode that answered instead (core.FailedOpen,
	// core.FailedClosed, core.FromFallback: see DegradedName). When it
	// failed open or closed no counter was read: Limit is the rule's, but
	// Remaining and Used are 0 and ResetAt is zero, unknown (Rule names the
	// rule that would have decided). Under fallback they are the local
	// limiter's, on its share of the limit.
	Degraded core.Source
	// Decision is the whole decision, one PolicyResult per rule that
	// applied, for the rate-limit fields (ratelimitfields.Config.Format).
	Decision core.Decision
}

// Bounds on a Check's strings, in bytes: a longer one is invalid input
// naming its field (they become store keys; a check names a caller, it
// does not carry data). The front doors check them with the same values.
const (
	MaxDimension      = 128
	MaxIdentifier     = 1024
	MaxEndpoint       = 2048
	MaxIdempotencyKey = 256
	// MaxRule is the longest rule ID (a core policy name: 1 to 64
	// characters).
	MaxRule = 64
)

// Engine decides checks under the rules in force, on one store. It is safe
// for concurrent use; a rules reload swaps the rules in force atomically
// (checks in flight finish under the rules they started with), and
// counters, kept in the store under rule ID and identifier, survive the
// reload of every rule that keeps its ID and limit.
type Engine struct {
	store core.Store
	src   rules.Source
	cfg   config
	cur   atomic.Pointer[state]
	// ovMu serializes the application of overrides; applied holds those
	// this engine has set on the store and not cleared since.
	// usage admits one Usage at a time (a semaphore of one).
	usage   chan struct{}
	ovMu    sync.Mutex
	applied map[overrideKey]appliedOverride
	// ended holds the revisions of the lapsed overrides of the snapshot
	// in force (tombstones of cleared ones) this engine has cleared on
	// the store.
	ended map[overrideKey]int64
	// ovPending: the last application left overrides to retry.
	ovPending atomic.Bool
	// events holds the observations told to the observers (see observe).
	events sync.Pool
	// arenas and batches hold the memory of CheckBatchFunc's results
	// (*arena) and of its rounds (*batchScratch).
	arenas, batches sync.Pool
}

// state is what one snapshot decides with: immutable, swapped whole.
type state struct {
	snap *rules.Snapshot
	// lim decides every limited rule (neither unlimited nor Deny), one
	// policy per rule named by its ID: every decision of the engine is
	// one of its CheckGroupWith calls (see decide); nil when no rule is
	// limited.
	lim *core.Limiter
	// deny: some rule is a Deny rule (it has no policy: every check a Deny
	// rule may match looks for one).
	deny bool
}

// New builds an engine deciding on store under the rules of src's first
// snapshot (src.Load), and applies the snapshot's overrides in force to the
// store (see rules.Override; one that fails is logged, not fatal). It
// follows src's changes once Run is called. An error means the rules could
// not be loaded or the options are invalid.
func New(ctx context.Context, store core.Store, src rules.Source, opts ...Option) (*Engine, error) {
	if store == nil {
		return nil, errors.New("engine: New: store: required")
	}
	if src == nil {
		return nil, errors.New("engine: New: rules source: required")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	e := &Engine{store: store, src: src, cfg: cfg, applied: map[overrideKey]appliedOverride{}, ended: map[overrideKey]int64{}, usage: make(chan struct{}, 1)}
	snap, err := src.Load(ctx)
	if err != nil {
		return nil, err // the source's errors name it ("rules file F: ...")
	}
	st, err := e.build(snap)
	if err != nil {
		return nil, err
	}
	e.cur.Store(st)
	octx, cancel := overridesContext(ctx)
	defer cancel()
	e.applyOverrides(octx, st)
	return e, nil
}

// Run puts every new snapshot of the rules source in force until ctx ends
// (src.Watch), with its overrides (new or changed ones set on the store,
// vanished ones cleared; one that fails is logged, reported to an
// OverridesObserver and retried every second until it is applied, or with
// the next snapshot); a rule set the
// engine cannot use is refused, logged, reported to the observers and
// returned to the source (apply's error), and the rules in force stay. When
// apply returns, the snapshot is in force and its overrides have been
// tried on the store. It returns nil
// when ctx ends, or the source's error.
func (e *Engine) Run(ctx context.Context) error {
	rctx, stop := context.WithCancel(ctx)
	retried := make(chan struct{})
	go func() {
		defer close(retried)
		e.retryOverrides(rctx)
	}()
	defer func() {
		stop()
		<-retried
	}()
	err := e.src.Watch(ctx, func(s *rules.Snapshot) error {
		if err := e.apply(ctx, s); err != nil {
			e.cfg.log.Error("ratelimitd: rules refused; the rules in force stay", "revision", s.Revision(), "err", err)
			e.reloaded(err)
			return err
		}
		e.cfg.log.Info("ratelimitd: rules reloaded", "revision", s.Revision(), "rules", len(s.Rules()))
		e.reloaded(nil)
		return nil
	}, func(err error) {
		e.cfg.log.Error("ratelimitd: invalid rules; the rules in force stay", "revision", e.Snapshot().Revision(), "err", err)
		e.reloaded(err)
	})
	if ctx.Err() != nil {
		return nil
	}
	return err // the source's errors name it
}

func (e *Engine) reloaded(err error) {
	s := e.Snapshot()
	for _, o := range e.cfg.observers {
		o.Reloaded(s, err)
	}
}

// apply puts s in force, then applies its overrides (see
// applyOverrides: a failure there is logged and reported, not returned).
func (e *Engine) apply(ctx context.Context, s *rules.Snapshot) error {
	st, err := e.build(s)
	if err != nil {
		return err
	}
	e.cur.Store(st)
	octx, cancel := overridesContext(ctx)
	defer cancel()
	e.applyOverrides(octx, st)
	return nil
}

// Snapshot returns the rules in force.
func (e *Engine) Snapshot() *rules.Snapshot { return e.cur.Load().snap }

// build compiles s into its limiter.
func (e *Engine) build(s *rules.Snapshot) (*state, error) {
	if s == nil {
		return nil, errors.New("engine: rules: nil snapshot")
	}
	st := &state{snap: s}
	policies := make([]core.Policy, 0, len(s.Rules()))
	for _, r := range s.Rules() {
		st.deny = st.deny || r.Deny
		if r.Unlimited || r.Deny { // neither counts anything: no policy (a Deny rule's Rate 0 is no valid limit)
			continue
		}
		policies = append(policies, core.Policy{Name: r.ID, Key: named, Limit: r.Limit, Tiers: r.Tiers, Shadow: r.Shadow, Lease: r.Lease})
	}
	if len(policies) == 0 {
		return st, nil
	}
	idem := core.Idempotency{TTL: e.cfg.idemTTL, MaxRepeats: e.cfg.idemRepeats}
	// Groups name each op's tier: the tiering core requires of policies
	// with Tiers is never consulted.
	tiers := core.Tiering{Key: named, Resolve: func(context.Context, string) (string, error) { return "", nil }}
	lim, err := core.NewLimiter(e.store, policies, core.WithIdempotency(idem), core.WithTiering(tiers))
	if err != nil {
		return nil, fmt.Errorf("engine: rules %s: %w", s.Revision(), err)
	}
	st.lim = lim
	return st, nil
}

// named is the Key of every policy of the engine's limiter (and of its
// tiering). It is never called: the engine decides groups, whose ops name
// their identities and tiers.
func named(keyfunc.Request) (string, error) { return "", keyfunc.ErrNoKey }

// decide decides ops, all or nothing, with call's idempotency: the one
// decision every call of the engine makes, on the one limiter of st's
// snapshot. No ops (no limited rule applies) is allowed, nothing counted.
func (st *state) decide(ctx context.Context, ops []core.GroupOp, call core.GroupCall) (core.Decision, error) {
	var d core.Decision
	err := st.decideTo(ctx, ops, call, &d)
	return d, err
}

// decideTo is decide writing the Decision to *d (left zero on an error),
// for the callers that keep it in place.
func (st *state) decideTo(ctx context.Context, ops []core.GroupOp, call core.GroupCall, d *core.Decision) error {
	if len(ops) == 0 {
		*d = core.Decision{Allowed: true}
		return nil
	}
	return st.lim.CheckGroupTo(ctx, ops, call, d)
}

// validate checks c's fields (for every call but Descriptors) and returns
// the rule it names, if any.
func (e *Engine) validate(st *state, c *Check) (*rules.Rule, error) {
	switch {
	case c.Dimension == "":
		return nil, invalid("dimension", "required")
	case len(c.Dimension) > MaxDimension:
		return nil, invalid("dimension", "at most %d bytes, got %d", MaxDimension, len(c.Dimension))
	case c.Identifier == "":
		return nil, invalid("identifier", "required")
	case len(c.Identifier) > MaxIdentifier:
		return nil, invalid("identifier", "at most %d bytes, got %d", MaxIdentifier, len(c.Identifier))
	case len(c.Endpoint) > MaxEndpoint:
		return nil, invalid("endpoint", "at most %d bytes, got %d", MaxEndpoint, len(c.Endpoint))
	case c.Cost < 0:
		return nil, invalid("cost", "must not be negative, got %d", c.Cost)
	case len(c.IdempotencyKey) > MaxIdempotencyKey:
		return nil, invalid("idempotency_key", "at most %d bytes, got %d", MaxIdempotencyKey, len(c.IdempotencyKey))
	}
	if !c.ClientTime.IsZero() {
		if skew := e.cfg.now().Sub(c.ClientTime); skew > e.cfg.maxSkew || skew < -e.cfg.maxSkew {
			return nil, invalid("client_time", "%s is more than %s off the server's clock", c.ClientTime.UTC().Format(time.RFC3339), e.cfg.maxSkew)
		}
	}
	if c.Rule == "" {
		return nil, nil
	}
	r, ok := st.snap.Rule(c.Rule)
	switch {
	case !ok:
		return nil, invalid("rule", "no rule %q", c.Rule)
	case r.Envoy != nil:
		return nil, invalid("rule", "rule %q is an Envoy rule (decided by descriptors)", c.Rule)
	case r.Dimension != c.Dimension:
		return nil, invalid("rule", "rule %q counts dimension %q, not %q", c.Rule, r.Dimension, c.Dimension)
	}
	return r, nil
}

// Check decides c under the rules that apply to it: the native rules of
// its dimension whose endpoints match its endpoint (an empty endpoint: the
// rules without endpoint patterns only), or the rule it names, all or
// nothing (a denial by one consumes nothing from the others). Cost 0
// peeks: nothing is consumed, and Allowed says whether a check of cost 1
// would pass now. A check no rule applies to is allowed, with Rule "" and
// nothing counted. A repeat of an admitted check with the same idempotency
// key and fields (dimension, identifier, endpoint, rule, cost) is allowed
// without being counted (within the idempotency TTL and repeat bound). A Deny rule (rules.Rule.Deny) that applies denies the
// check, peek or not, without counting anything on any rule (the others are
// peeked): its result has Limit 0 and RetryAfter until the end of its
// unit's current window, aligned on the Unix epoch (unless it is a shadow,
// which denies nothing).
//
// Invalid input is an error wrapping ErrInvalid (a *FieldError naming the
// field). A store failure is an error wrapping the store's: its text is for
// logs, never for a client. Under a guard (core/guard) a store failure is
// answered by the guard's failure mode instead, and the Decision's Source
// says so.
func (e *Engine) Check(ctx context.Context, c Check) (Result, error) {
	start := time.Now()
	st := e.cur.Load()
	var d core.Decision
	err := e.check(ctx, st, &c, nil, nil, &d)
	kind := KindCheck
	if c.Cost == 0 {
		kind = KindPeek
	}
	e.observe(ctx, kind, &c, nil, &d, start, err)
	if err != nil {
		return Result{}, err
	}
	return resultOf(d), nil
}

// opsBuf is how many ops a check holds without allocating: the rules
// one check matches are few.
const opsBuf = 8

// check decides c on st into *d (zero on an error): the rules it matches
// (Snapshot.Match, or the one it names) become the ops of one decision,
// the Deny rules among them denials (which make the others peeks). Its
// results are in mem's memory when mem has room for them (nil: their
// own); memo, when not nil, remembers the rules a batch's previous check
// matched.
func (e *Engine) check(ctx context.Context, st *state, c *Check, mem *arena, memo *matches, d *core.Decision) error {
	var obuf [opsBuf]core.GroupOp
	ops, denied, denies, err := e.prepare(st, c, obuf[:0], memo)
	if err != nil {
		*d = core.Decision{}
		return err
	}
	call := core.GroupCall{Results: mem.take(len(ops))}
	if !denies && c.IdempotencyKey != "" {
		scope := [2]string{c.Endpoint, c.Rule}
		call.IdempotencyKey, call.Scope = c.IdempotencyKey, scope[:]
	}
	if err := st.decideTo(ctx, ops, call, d); err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	withDenials(d, denied, denies)
	return nil
}

// prepare validates c and appends to ops the op of each limited rule it
// matches (see plan), returning the results of its Deny rules and whether
// one denies it. memo, when not nil, is the rules the previous check of
// the same batch (the same snapshot) matched.
func (e *Engine) prepare(st *state, c *Check, ops []core.GroupOp, memo *matches) (_ []core.GroupOp, denied []core.PolicyResult, denies bool, err error) {
	r, err := e.validate(st, c)
	if err != nil {
		return ops, nil, false, err
	}
	var rbuf [opsBuf]*rules.Rule
	matched := rbuf[:0]
	switch {
	case r != nil:
		matched = append(matched, r)
	case memo != nil:
		matched = memo.match(st.snap, c.Dimension, c.Endpoint)
	default:
		matched = st.snap.AppendMatch(matched, "", c.Dimension, c.Endpoint)
	}
	ops, denied, denies = e.plan(st, c, matched, ops)
	return ops, denied, denies, nil
}

// plan appends to ops the op of each limited rule of matched for c, and
// returns the results of its Deny rules, decided now; denies is true when
// one of them (not a shadow) denies c: then every op of c is a peek.
func (e *Engine) plan(st *state, c *Check, matched []*rules.Rule, ops []core.GroupOp) (_ []core.GroupOp, denied []core.PolicyResult, denies bool) {
	at := len(ops) // c's ops follow those ops holds already
	var now time.Time
	for _, m := range matched {
		switch {
		case m.Unlimited:
		case m.Deny: // no counter: denied now
			if now.IsZero() {
				now = e.cfg.now()
			}
			denied = append(denied, denial(m, now))
			denies = denies || !m.Shadow
		default:
			op := core.GroupOp{Policy: m.ID, Identity: c.Identifier, Cost: c.Cost}
			if len(m.Tiers) > 0 {
				op.Tier = st.snap.TierOf(c.Dimension, c.Identifier)
			}
			ops = append(ops, op)
		}
	}
	if denies {
		for j := range ops[at:] {
			ops[at+j].Cost = 0
		}
	}
	return ops, denied, denies
}

// matches remembers the native rules one dimension and endpoint matched
// in a snapshot, for the checks of one batch: most name the same ones as
// the check before them, and are matched once.
type matches struct {
	dimension, endpoint string
	rules               []*rules.Rule
	valid               bool
}

// match returns the rules of s that dimension and endpoint match
// (Snapshot.AppendMatch), matching them only when the last call named
// others. The result is m's memory, valid until the next call.
func (m *matches) match(s *rules.Snapshot, dimension, endpoint string) []*rules.Rule {
	if !m.valid || m.dimension != dimension || m.endpoint != endpoint {
		m.rules = s.AppendMatch(m.rules[:0], "", dimension, endpoint)
		m.dimension, m.endpoint, m.valid = dimension, endpoint, true
	}
	return m.rules
}

// reset forgets the last match (a new batch: perhaps a new snapshot).
func (m *matches) reset() {
	clear(m.rules)
	m.dimension, m.endpoint, m.rules, m.valid = "", "", m.rules[:0], false
}

// arena hands the checks of a batch the memory of their results, from one
// array. A nil *arena has none.
type arena struct{ buf []core.PolicyResult }

// take returns room for n results (length 0, capacity n); nil from a nil
// arena. An arena that has not that much left moves on to an array twice
// as large (the results it handed out stay where they are), so that a
// batch whose checks match several rules each allocates a few arrays, not
// one per check, and a pooled arena grows to its batches.
func (a *arena) take(n int) []core.PolicyResult {
	if a == nil || n == 0 {
		return nil
	}
	if len(a.buf)+n > cap(a.buf) {
		a.buf = make([]core.PolicyResult, 0, max(2*cap(a.buf), n, 16))
	}
	at := len(a.buf)
	a.buf = a.buf[:at+n]
	return a.buf[at : at : at+n]
}

// reset empties a, with room for at least n results.
func (a *arena) reset(n int) {
	if cap(a.buf) < n {
		a.buf = make([]core.PolicyResult, 0, n)
	}
	a.buf = a.buf[:0]
}

// release clears the results a handed out (they name identities) and
// empties it.
func (a *arena) release() {
	clear(a.buf)
	a.buf = a.buf[:0]
}

// resultOf summarizes d by its binding rule.
func resultOf(d core.Decision) Result {
	var res Result
	res.set(&d)
	return res
}

// set makes r the summary of d by its binding rule, d included (d may be
// &r.Decision).
func (r *Result) set(d *core.Decision) {
	if d != &r.Decision {
		r.Decision = *d
	}
	r.Allowed, r.State, r.Degraded = d.Allowed, d.State(), degraded(d)
	r.Rule, r.Limit, r.Remaining, r.Used, r.ResetAt, r.RetryAfter = "", 0, 0, 0, time.Time{}, 0
	if len(d.Results) == 0 {
		return
	}
	b := &d.Results[d.Binding]
	r.Rule, r.Limit = b.Policy, b.Capacity
	if !d.Allowed {
		r.RetryAfter = b.RetryAfter
	}
	if Unchecked(b.Source) { // no counter was read: none is stated
		return
	}
	r.Remaining = b.Remaining
	r.Used = max(b.Capacity-b.Remaining, 0)
	r.ResetAt = resetAt(&b.Result)
}

// resetAt is when r's key is fresh again, on the store's clock when the
// store decided.
func resetAt(r *core.Result) time.Time {
	if r.At != 0 {
		return time.UnixMicro(r.At).Add(r.ResetAfter)
	}
	return time.Now().Add(r.ResetAfter)
}
