package core

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/keyfunc"
)

// Hook observes a policy result, with the request that caused it. ctx is the
// caller's context. r and the strings it returns are valid only during the
// call (under Fiber they alias buffers the next request overwrites): a hook
// that keeps one must copy it (strings.Clone).
type Hook func(ctx context.Context, r keyfunc.Request, p PolicyResult)

// Observer sees every decision of a Limiter: metrics and tracing modules
// implement it (see adapters/promlimit and adapters/otellimit).
type Observer interface {
	// Decided is called in the requesting goroutine after each Check,
	// CheckWith or Decide, with the time it took. err is the error the
	// caller got (d is then meaningless). It must not keep d or r, nor any
	// string from r without copying it (see Hook).
	Decided(ctx context.Context, r keyfunc.Request, d *Decision, took time.Duration, err error)
}

// Limiter checks requests against its policies in a Store. Build one with
// NewLimiter: the zero Limiter has no store and no policies and is not
// usable. A Limiter is safe for concurrent use, and SetPolicies may run
// while requests are decided.
//
// Its entry points, from the simplest:
//
//   - Check(ctx, r): decide r under every policy that matches it, cost 1.
//   - CheckWith(ctx, r, c): Check with a cost and a key override (Call).
//   - Decide(ctx, r, c, d): CheckWith writing into a Decision the caller
//     owns (the adapters keep one per request).
//   - Peek(ctx, r): where r stands, counting nothing.
//   - Allow, AllowN, Wait, WaitN, Reserve, ReserveN: one policy and an
//     identity the caller names, outside a request (see AllowN).
type Limiter struct {
	store   Store
	set     atomic.Pointer[policySet]
	tiers   *tierCache
	cfg     limiterConfig
	scratch sync.Pool // of *scratch, for store calls of one op
	takes   sync.Pool // of *takeBuf, for store calls of several ops
	groups  sync.Pool // of *groupsBuf, for CheckGroups' store calls
}

type limiterConfig struct {
	onStateChange, onWarning, onShadowDeny Hook
	shadow                                 bool
	tiering                                *Tiering
	observers                              []Observer
	idem                                   *Idempotency
	storeTimeout                           time.Duration
}

// LimiterOption configures a Limiter.
type LimiterOption func(*limiterConfig)

// OnStateChange registers a hook called, in the requesting goroutine, each
// time a policy's state for an identity changes (Normal, Warning,
// Throttled).
func OnStateChange(h Hook) LimiterOption { return func(c *limiterConfig) { c.onStateChange = h } }

// OnWarning registers a hook called when an identity enters the Warning
// state of a policy (usage rose above the warn threshold).
func OnWarning(h Hook) LimiterOption { return func(c *limiterConfig) { c.onWarning = h } }

// OnShadowDeny registers a hook called each time a shadow policy would have
// denied a request.
func OnShadowDeny(h Hook) LimiterOption { return func(c *limiterConfig) { c.onShadowDeny = h } }

// WithObserver adds an Observer of every decision. Observers run in order,
// in the requesting goroutine; a slow one slows every request.
func WithObserver(o Observer) LimiterOption {
	return func(c *limiterConfig) {
		if o != nil {
			c.observers = append(c.observers, o)
		}
	}
}

// WithStoreTimeout bounds each store call a decision or a refund makes
// (none by default). A decision runs on a context detached from the
// caller's cancellation, so that a client that disconnects is still counted:
// the bound is then the store's own. The sluice stores bound every call (the
// Redis store by its WithTimeout, a guard by its WithTimeout; the memory
// store never waits), so this is for a Store of your own that may block.
// Zero means no bound; a negative d is an error from NewLimiter.
func WithStoreTimeout(d time.Duration) LimiterOption {
	return func(c *limiterConfig) { c.storeTimeout = d }
}

// WithShadow puts every policy of the Limiter on trial (see Policy.Shadow).
func WithShadow() LimiterOption { return func(c *limiterConfig) { c.shadow = true } }

// WithTiering resolves each caller's tier for the policies that have Tiers.
func WithTiering(t Tiering) LimiterOption { return func(c *limiterConfig) { c.tiering = &t } }

// NewLimiter returns a Limiter of policies on store. Every policy is
// validated: an error names the policy and the field.
func NewLimiter(store Store, policies []Policy, opts ...LimiterOption) (*Limiter, error) {
	if store == nil {
		return nil, errors.New("sluice: nil store")
	}
	if len(policies) == 0 {
		return nil, errors.New("sluice: no policies")
	}
	var c limiterConfig
	for _, o := range opts {
		o(&c)
	}
	if c.storeTimeout < 0 {
		return nil, fmt.Errorf("sluice: WithStoreTimeout: must be positive, got %s", c.storeTimeout)
	}
	if c.idem != nil {
		if err := c.idem.validate(); err != nil {
			return nil, err
		}
	}
	l := &Limiter{store: store, cfg: c}
	if c.tiering != nil {
		if c.tiering.Key == nil || c.tiering.Resolve == nil {
			return nil, errors.New("sluice: WithTiering: Key and Resolve are required")
		}
		l.tiers = newTierCache(c.tiering)
	}
	if err := l.SetPolicies(policies); err != nil {
		return nil, err
	}
	return l, nil
}

// Call adjusts one Check.
type Call struct {
	// Cost is how many units the request takes; 0 means 1.
	Cost int64
	// Key, if set, replaces every policy's Key for this call (an adapter's
	// WithKey).
	Key keyfunc.Func
}

// Check decides r under every policy with cost 1. A policy whose Key finds
// no identity for r is skipped or denies r, as its MissingKey says. An
// error means the request could not be decided: every matching policy was
// skipped (the error is the first key error, wrapping ErrNoKey when no key
// was found), the cost was negative, or the store failed. The caller then
// chooses to fail open or closed; the Decision is meaningless.
//
// The store is called on a context detached from ctx's cancellation (its
// values are kept), so a client that goes away mid-decision is still
// counted: each call is bounded by the store's own timeout (see
// WithStoreTimeout). Hooks and Observers get ctx itself.
func (l *Limiter) Check(ctx context.Context, r keyfunc.Request) (Decision, error) {
	return l.CheckWith(ctx, r, Call{})
}

// CheckWith is Check with a cost and a key override.
func (l *Limiter) CheckWith(ctx context.Context, r keyfunc.Request, c Call) (Decision, error) {
	var d Decision
	if err := l.Decide(ctx, r, c, &d); err != nil {
		return Decision{}, err
	}
	d.detach() // d is returned by value: no aliasing of d.buf
	return d, nil
}

// Decide is CheckWith writing into d, which adapters allocate once per
// request (d then holds the result of one policy without another
// allocation; more take one array). d must not be copied afterwards.
func (l *Limiter) Decide(ctx context.Context, r keyfunc.Request, c Call, d *Decision) error {
	if len(l.cfg.observers) == 0 {
		return l.decideCall(ctx, r, c, d)
	}
	start := time.Now()
	err := l.decideCall(ctx, r, c, d)
	took := time.Since(start)
	for _, o := range l.cfg.observers {
		o.Decided(ctx, r, d, took, err)
	}
	return err
}

func (l *Limiter) decideCall(ctx context.Context, r keyfunc.Request, c Call, d *Decision) error {
	cost := c.Cost
	switch {
	case cost == 0:
		cost = 1
	case cost < 0:
		return fmt.Errorf("sluice: Call: %w", invalidField(ErrInvalidCost, "Cost", "must not be negative, got %d", cost))
	}
	sctx, cancel := l.storeContext(ctx, &d.sctx)
	if cancel != nil {
		defer cancel()
	}
	if err := l.prepare(ctx, r, c.Key, cost, d); err != nil {
		return err
	}
	var err error
	if rec, ok := l.requestRecord(r, cost, d); ok {
		err = l.idempotent(sctx, d, rec)
	} else {
		err = l.run(sctx, d, nil, nil)
	}
	if err != nil {
		return err
	}
	d.settle()
	l.hooks(ctx, r, d)
	return nil
}

// requestRecord returns the key of r's idempotency record, and false when
// r has none: the Limiter has no idempotency, r carries no key, or nothing
// of d takes.
func (l *Limiter) requestRecord(r keyfunc.Request, cost int64, d *Decision) (Key, bool) {
	i := l.cfg.idem
	if i == nil || len(d.Results) == 0 {
		return Key{}, false
	}
	v := r.Header(i.Header)
	if v == "" {
		return Key{}, false
	}
	a := anchor(d.Results)
	if a < 0 {
		return Key{}, false
	}
	return recordKey(r, cost, d, a, v), true
}

// storeContext returns the context of a decision's store calls: ctx's
// values without its cancellation (see detached), bounded by
// WithStoreTimeout if set. sc, which the decision owns (a Decision's
// sctx, a group's), becomes that context; it may be nil when ctx has no
// cancellation. It allocates nothing unless the Limiter has a store
// timeout.
func (l *Limiter) storeContext(ctx context.Context, sc *detached) (context.Context, context.CancelFunc) {
	if ctx.Done() == nil { // nothing to detach from (context.Background, say)
		if l.cfg.storeTimeout > 0 {
			return context.WithTimeout(ctx, l.cfg.storeTimeout)
		}
		return ctx, nil
	}
	sc.parent = ctx
	if l.cfg.storeTimeout > 0 {
		return context.WithTimeout(sc, l.cfg.storeTimeout)
	}
	return sc, nil
}

// detached returns the context of a store call outside a decision (a
// refund, a key-level take, a cancel): ctx's values without its
// cancellation, bounded by WithStoreTimeout if set.
func (l *Limiter) detached(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx = context.WithoutCancel(ctx)
	if l.cfg.storeTimeout > 0 {
		return context.WithTimeout(ctx, l.cfg.storeTimeout)
	}
	return ctx, func() {}
}

// Peek reports r's state under every matching policy without counting it.
// Its Decision's Allowed reports whether a request of cost 1 would be
// admitted now by every policy that is not a shadow.
func (l *Limiter) Peek(ctx context.Context, r keyfunc.Request) (Decision, error) {
	var d Decision
	sctx, cancel := l.storeContext(ctx, &d.sctx)
	if cancel != nil {
		defer cancel()
	}
	if err := l.prepare(ctx, r, nil, 0, &d); err != nil {
		return Decision{}, err
	}
	if err := l.run(sctx, &d, nil, nil); err != nil {
		return Decision{}, err
	}
	d.settle()
	d.detach()
	return d, nil
}

// prepare resets d and fills its Results for the policies that apply to r,
// up to the store call: each policy's identity, limit and tier. A policy
// without an identity for r is skipped (named in d.Skipped) or, with
// DenyRequest, gets its Unidentified denial; the request is then denied, so
// the other policies only peek (cost 0). When every matching policy was
// skipped, prepare returns the first key error: no decision can be made.
func (l *Limiter) prepare(ctx context.Context, r keyfunc.Request, override keyfunc.Func, cost int64, d *Decision) error {
	set := l.set.Load()
	var idx []int
	if set.everyRequest {
		idx = set.allIdx()
	} else {
		idx = set.matched(r)
	}
	// Reset d field by field: Results[:n] are all written below, and
	// clearing d.buf too would cost a request a second zeroing of memory
	// the allocator has just zeroed.
	d.Allowed, d.Binding, d.Repeat, d.Skipped, d.idem = true, 0, false, nil, nil
	d.Results = d.buf[:0]
	if len(idx) == 0 {
		return nil
	}
	tier := ""
	if l.tiers != nil && set.anyTiers(idx) {
		tier = l.tiers.tier(ctx, r)
	}
	denied := false
	var keyErr error
	keyPolicy := ""
	for _, i := range idx {
		p := &set.policies[i]
		id, err := p.identity(r, override)
		if err != nil && p.MissingKey == SkipPolicy {
			d.skip(p)
			if keyErr == nil {
				keyErr, keyPolicy = err, p.Name
			}
			continue
		}
		lim := &p.Limit
		if tl, ok := p.tiers[tier]; ok {
			lim = tl
		}
		// Field by field: Result is written by the store, or below.
		pr := d.addResult(len(idx))
		pr.Policy, pr.Limit, pr.Tier, pr.Shadow, pr.refund, pr.id, pr.cost, pr.lease = p.Name, *lim, "", p.Shadow, p.Refund, id, cost, p.Lease
		pr.Unidentified = err != nil
		if len(p.Tiers) > 0 {
			pr.Tier = tier
		}
		if pr.Unidentified {
			pr.unidentified()
			denied = denied || !p.Shadow
		}
	}
	if len(d.Results) == 0 {
		return fmt.Errorf("sluice: policy %q: key: %w", keyPolicy, nested{keyErr})
	}
	if denied {
		d.peekOnly()
	}
	return nil
}

// addResult extends d.Results by one, unwritten, and returns it; past
// d.buf, in the request's own array of up to most.
func (d *Decision) addResult(most int) *PolicyResult {
	n := len(d.Results)
	if n == cap(d.Results) {
		d.Results = append(make([]PolicyResult, 0, most), d.Results...)
	}
	d.Results = d.Results[:n+1]
	return &d.Results[n]
}

// skip names p, skipped for want of an identity, in d.Skipped.
func (d *Decision) skip(p *compiledPolicy) {
	if d.Skipped == nil {
		d.Skipped = p.name // no allocation for one skipped policy
	} else {
		// A new array: p.name has no room, so it is never written.
		d.Skipped = append(d.Skipped, p.Name)
	}
}

// unidentified makes pr its policy's denial of a request without an
// identity for it (DenyRequest): nothing counted, never admitted.
func (pr *PolicyResult) unidentified() {
	pr.cost = 0
	pr.Result = Result{Capacity: pr.Limit.Capacity(), RetryAfter: RetryNever, State: Throttled, Previous: Throttled}
}

// peekOnly makes every result of d, a request denied, a peek: the others
// count nothing.
func (d *Decision) peekOnly() {
	for j := range d.Results {
		d.Results[j].cost = 0
	}
}

// run asks the store about every identified result of d (and about extra,
// if not nil, as one more op of the same all-or-nothing group, its Result
// written to extraRes), then sets d.Allowed and d.Binding.
func (l *Limiter) run(ctx context.Context, d *Decision, extra *Op, extraRes *Result) error {
	m := 0 // results the store decides
	for j := range d.Results {
		if !d.Results[j].Unidentified {
			m++
		}
	}
	switch {
	case m == 0:
	case m == 1 && extra == nil: // one op, pooled: no allocation
		var p *PolicyResult
		for j := range d.Results {
			if !d.Results[j].Unidentified {
				p = &d.Results[j]
			}
		}
		sc, _ := l.scratch.Get().(*scratch)
		if sc == nil {
			sc = new(scratch)
		}
		sc.op[0] = p.op()
		// The store writes the Result in place: out is p's own.
		err := l.store.Take(ctx, sc.op[:], unsafe.Slice(&p.Result, 1))
		sc.op[0] = Op{} // keeps no identity
		l.scratch.Put(sc)
		if err != nil {
			return fmt.Errorf("sluice: policy %q: %w", p.Policy, err)
		}
	default:
		if err := l.take(ctx, d.Results, m, extra, extraRes); err != nil {
			return err
		}
	}
	d.Allowed = !refused(d.Results)
	d.Binding = binding(d.Results)
	return nil
}

// refused reports whether the store counted nothing of rs: a result that
// is not a shadow was denied a cost, or, when every result only peeks, a
// peek that is not a shadow found no unit. A peek beside ops that take is
// an answer, not a vote: the stores' all or nothing is over the takes
// (see Store.Take), so such a denied peek leaves the others counted and
// the Decision allowed.
func refused(rs []PolicyResult) bool {
	takes := false
	for j := range rs {
		takes = takes || rs[j].cost > 0
	}
	for j := range rs {
		if p := &rs[j]; !p.Allowed && !p.Shadow && (p.cost > 0 || !takes) {
			return true
		}
	}
	return false
}

// take decides the m identified results of rs, and extra, in one
// all-or-nothing Take: a request denied by one policy consumes nothing from
// the others. Its ops and results are pooled memory (a Store keeps
// neither).
func (l *Limiter) take(ctx context.Context, rs []PolicyResult, m int, extra *Op, extraRes *Result) error {
	n := m
	if extra != nil {
		n++
	}
	tb, _ := l.takes.Get().(*takeBuf)
	if tb == nil {
		tb = new(takeBuf)
	}
	defer l.putTake(tb)
	ops, where := tb.ops[:0], tb.where[:0] // ops[k] decides rs[where[k]]
	for j := range rs {
		if p := &rs[j]; !p.Unidentified {
			ops = append(ops, p.op())
			where = append(where, j)
		}
	}
	if extra != nil {
		ops = append(ops, *extra)
	}
	results := append(tb.res[:0], make([]Result, n)...)
	tb.ops, tb.where, tb.res = ops, where, results
	if err := l.store.Take(ctx, ops, results); err != nil {
		names := make([]string, len(where))
		for k, j := range where {
			names[k] = strconv.Quote(rs[j].Policy)
		}
		return fmt.Errorf("sluice: policies %s: %w", strings.Join(names, ", "), err)
	}
	for k, j := range where {
		rs[j].Result = results[k]
	}
	if extra != nil {
		*extraRes = results[len(ops)-1]
	}
	return nil
}

// takeBuf is the memory of one take of several ops, pooled.
type takeBuf struct {
	ops   []Op
	res   []Result
	where []int
}

// maxPooledOps bounds the ops of a takeBuf put back in the pool: a rare
// large group does not keep its memory.
const maxPooledOps = 1024

// putTake puts tb back in the pool, keeping no identity or limit.
func (l *Limiter) putTake(tb *takeBuf) {
	if cap(tb.ops) > maxPooledOps {
		return
	}
	clear(tb.ops)
	clear(tb.res)
	l.takes.Put(tb)
}

// Refund gives back the units of a checked request to the policies whose
// Refund matches the response status (and that counted it): each policy's
// admission, named by its Result.At, is undone exactly or not at all (see
// Store.Refund), on the state it was made on: an admission under an
// identity's override (see SetOverride) goes back to that override's state,
// under its limit, and gives back nothing once that override has ended or
// been replaced. A Decision is refunded at most once: calling Refund
// again gives nothing more. Adapters call it after the response when the
// Decision is Refundable. Like a decision, it runs on a context detached
// from ctx's cancellation. A request whose idempotency record was written
// (see WithIdempotency) also gives the record back, so a retry of a request
// that was not counted is counted.
func (l *Limiter) Refund(ctx context.Context, d *Decision, status int) error {
	if !d.Allowed {
		return nil
	}
	ctx, cancel := l.detached(ctx)
	defer cancel()
	refunded := false
	for i := range d.Results {
		p := &d.Results[i]
		if p.cost > 0 && p.Allowed && p.refund.matches(status) {
			a, ok := p.admission()
			if !ok {
				p.cost = 0 // nothing the store can give back
				continue
			}
			if err := l.store.Refund(ctx, a); err != nil {
				return fmt.Errorf("sluice: policy %q: refund: %w", p.Policy, err)
			}
			p.cost = 0 // an admission is refunded once
			refunded = true
		}
	}
	if refunded && d.idem != nil && l.cfg.idem != nil {
		rec := d.idem
		d.idem = nil // refunded once
		if err := l.store.Refund(ctx, Admission{Key: rec.key, Limit: l.cfg.idem.first(), Cost: 1, At: rec.at}); err != nil {
			return fmt.Errorf("sluice: idempotency: refund: %w", err)
		}
	}
	return nil
}

func (l *Limiter) hooks(ctx context.Context, r keyfunc.Request, d *Decision) {
	c := &l.cfg
	if c.onStateChange == nil && c.onWarning == nil && c.onShadowDeny == nil {
		return
	}
	for _, p := range d.Results {
		if c.onShadowDeny != nil && p.ShadowDenied() {
			c.onShadowDeny(ctx, r, p)
		}
		if p.State == p.Previous {
			continue
		}
		if c.onStateChange != nil {
			c.onStateChange(ctx, r, p)
		}
		if c.onWarning != nil && p.State == Warning {
			c.onWarning(ctx, r, p)
		}
	}
}
