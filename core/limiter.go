package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/keyfunc"
)

// Policy is one limit on requests: the identity it counts by, and how many.
type Policy struct {
	// Name identifies the policy in headers, metrics and keys: 1 to 64 of
	// a-z A-Z 0-9 _ . : - , unique within a Limiter.
	Name string
	// Key returns the identity a request is counted under, for example
	// keyfunc.IP or keyfunc.Header("X-API-Key"). Required.
	Key keyfunc.Func
	// Limit is how many requests an identity may make.
	Limit Limit
	// Match selects the requests the policy applies to (all by default).
	Match Match
	// Tiers, if set, replaces Limit for callers whose tier (see WithTiering)
	// has an entry; other callers get Limit.
	Tiers map[string]Limit
	// Shadow puts the policy on trial: a request it would deny is allowed,
	// and its result is marked and reported to OnShadowDeny hooks.
	Shadow bool
	// Refund gives a request's units back after the response, when the
	// response matches: RefundFailed (status >= 400) or RefundSuccessful.
	Refund RefundWhen
}

// RefundWhen says which responses a policy does not count.
type RefundWhen uint8

const (
	// RefundNever counts every admitted request (the default).
	RefundNever RefundWhen = iota
	// RefundFailed gives back requests answered with status >= 400.
	RefundFailed
	// RefundSuccessful gives back requests answered with status < 400.
	RefundSuccessful
)

func (w RefundWhen) matches(status int) bool {
	return w == RefundFailed && status >= 400 || w == RefundSuccessful && status < 400
}

// PolicyResult is the decision of one policy for one request.
type PolicyResult struct {
	Policy string
	// Limit is the limit applied: the policy's, or its tier's.
	Limit Limit
	// Tier is the caller's tier when the policy has tiers.
	Tier string
	// Shadow: the policy is on trial; its denial did not deny the request.
	Shadow bool
	refund RefundWhen // next to Shadow: one word for both
	Result
	id   string // the identity; the store key is id + "\x00" + Policy (see storeKey)
	cost int64
}

// storeKey is the key of p's state in the store: identity, NUL, policy name.
func (p *PolicyResult) storeKey() string { return p.id + "\x00" + p.Policy }

// ShadowDenied reports whether a shadow policy would have denied the request.
func (p *PolicyResult) ShadowDenied() bool { return p.Shadow && !p.Allowed }

// Decision is the outcome of a request under every policy of a Limiter.
type Decision struct {
	// Allowed is false if any policy denied the request.
	Allowed bool
	// Results holds one entry per policy, in the Limiter's order.
	Results []PolicyResult
	// Binding is the index in Results of the most constraining policy: among
	// those that denied, the one with the longest wait; otherwise the one
	// with the smallest share of its capacity left. It drives the headers.
	Binding int

	// Repeat: the request repeated an admitted one (same idempotency key)
	// and passed without being counted.
	Repeat bool

	buf [2]PolicyResult // Results of up to two policies, without an allocation
}

// Limited reports whether any policy applied to the request.
func (d *Decision) Limited() bool { return len(d.Results) > 0 }

// Bound returns the most constraining result (zero if there is none).
func (d *Decision) Bound() PolicyResult {
	if d.Binding < len(d.Results) {
		return d.Results[d.Binding]
	}
	return PolicyResult{}
}

// State returns the most severe warning state over all policies.
func (d *Decision) State() State {
	s := Normal
	for i := range d.Results {
		s = max(s, d.Results[i].State)
	}
	return s
}

// Hook observes a policy result, with the request that caused it.
type Hook func(ctx context.Context, r keyfunc.Request, p PolicyResult)

// Observer sees every decision of a Limiter: metrics and tracing modules
// implement it (see adapters/promlimit and adapters/otellimit).
type Observer interface {
	// Decided is called in the requesting goroutine after each Check,
	// CheckWith or Decide, with the time it took. err is the error the
	// caller got (d is then meaningless). It must not keep d.
	Decided(ctx context.Context, r keyfunc.Request, d *Decision, took time.Duration, err error)
}

// Limiter checks requests against its policies in a Store. Build one with
// NewLimiter; it is safe for concurrent use. Every adapter calls Check.
type Limiter struct {
	store Store
	split SplitKeyStore // store, when it takes keys in parts
	set   atomic.Pointer[policySet]
	tiers *tierCache
	cfg   limiterConfig
}

// policySet is an immutable set of compiled policies; SetPolicies swaps it
// atomically, so a reload never drops or blocks a request.
type policySet struct {
	policies []compiledPolicy
	routes   trie
	// everyRequest: every policy applies to every request (no routes, no
	// methods), so no matching is needed.
	everyRequest bool
}

type compiledPolicy struct {
	Policy
	suffix string // "\x00" + name: the store key is identity + suffix
}

type limiterConfig struct {
	onStateChange, onWarning, onShadowDeny Hook
	shadow                                 bool
	tiering                                *Tiering
	observers                              []Observer
	idem                                   *Idempotency
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

// WithShadow puts every policy of the Limiter on trial (see Policy.Shadow).
func WithShadow() LimiterOption { return func(c *limiterConfig) { c.shadow = true } }

// WithTiering resolves each caller's tier for the policies that have Tiers.
func WithTiering(t Tiering) LimiterOption { return func(c *limiterConfig) { c.tiering = &t } }

// NewLimiter returns a Limiter of policies on store. Every policy is
// validated: an error names the policy and the field.
func NewLimiter(store Store, policies []Policy, opts ...LimiterOption) (*Limiter, error) {
	if store == nil {
		return nil, errors.New("sluice: NewLimiter: nil store")
	}
	if len(policies) == 0 {
		return nil, errors.New("sluice: NewLimiter: no policies")
	}
	var c limiterConfig
	for _, o := range opts {
		o(&c)
	}
	l := &Limiter{store: store, cfg: c}
	l.split, _ = store.(SplitKeyStore)
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

// SetPolicies replaces the Limiter's policies at once, after validating them
// all; on error the current policies stay. Requests in flight finish under
// the policies they started with. Keys are identity and policy name, so a
// policy that keeps its name keeps its counts.
func (l *Limiter) SetPolicies(policies []Policy) error {
	if len(policies) == 0 {
		return errors.New("sluice: no policies")
	}
	c := &l.cfg
	set := &policySet{}
	seen := map[string]bool{}
	for i, p := range policies {
		if err := ValidPolicyName(p.Name); err != nil {
			return fmt.Errorf("sluice: policy %d: %w", i, err)
		}
		if seen[p.Name] {
			return fmt.Errorf("sluice: policy %q: Name: duplicate", p.Name)
		}
		seen[p.Name] = true
		if p.Key == nil {
			return fmt.Errorf("sluice: policy %q: Key: required (for example keyfunc.IP)", p.Name)
		}
		if err := p.Limit.Validate(); err != nil {
			return fmt.Errorf("sluice: policy %q: %w", p.Name, err)
		}
		for tier, tl := range p.Tiers {
			if err := tl.Validate(); err != nil {
				return fmt.Errorf("sluice: policy %q: tier %q: %w", p.Name, tier, err)
			}
		}
		if len(p.Tiers) > 0 && c.tiering == nil {
			return fmt.Errorf("sluice: policy %q: Tiers: set, but the Limiter has no WithTiering", p.Name)
		}
		if len(p.Match.Routes) == 0 {
			set.routes.all = append(set.routes.all, i)
		}
		for _, route := range p.Match.Routes {
			if err := validateRoute(route); err != nil {
				return fmt.Errorf("sluice: policy %q: %w", p.Name, err)
			}
			set.routes.insert(route, i)
		}
		for _, m := range p.Match.Methods {
			if m == "" || strings.ToUpper(m) != m && strings.ToLower(m) != m {
				return fmt.Errorf("sluice: policy %q: Methods: %q is not a method", p.Name, m)
			}
		}
		p.Shadow = p.Shadow || c.shadow
		set.policies = append(set.policies, compiledPolicy{Policy: p, suffix: "\x00" + p.Name})
	}
	set.everyRequest = len(set.routes.all) == len(set.policies) && !set.anyMethods()
	l.set.Store(set)
	return nil
}

// matched returns the indices of the policies of set that apply to r, in
// order.
func (set *policySet) matched(r keyfunc.Request) []int {
	n := len(set.policies)
	seen := make([]bool, n)
	set.routes.match(r.Path(), func(i int) { seen[i] = true })
	out := make([]int, 0, n)
	method := ""
	for i, ok := range seen {
		if !ok {
			continue
		}
		if ms := set.policies[i].Match.Methods; len(ms) > 0 {
			if method == "" {
				method = r.Method()
			}
			if !slices.ContainsFunc(ms, func(m string) bool { return strings.EqualFold(m, method) }) {
				continue
			}
		}
		out = append(out, i)
	}
	return out
}

// ValidPolicyName reports whether name can name a policy.
func ValidPolicyName(name string) error {
	if len(name) == 0 || len(name) > 64 {
		return fmt.Errorf("Name: must be 1 to 64 characters, got %q", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == ':' || c == '-') {
			return fmt.Errorf("Name: only a-z A-Z 0-9 _ . : - allowed, got %q", name)
		}
	}
	return nil
}

// Policies returns a copy of the Limiter's current policies.
func (l *Limiter) Policies() []Policy {
	set := l.set.Load()
	ps := make([]Policy, len(set.policies))
	for i := range set.policies {
		ps[i] = set.policies[i].Policy
	}
	return ps
}

// Call adjusts one Check.
type Call struct {
	// Cost is how many units the request takes; 0 means 1.
	Cost int64
	// Key, if set, replaces every policy's Key for this call (an adapter's
	// WithKey).
	Key keyfunc.Func
}

// Check decides r under every policy with cost 1. An error means the request
// could not be decided (no identity, or a store failure): the caller chooses
// to fail open or closed; the Decision is then meaningless.
func (l *Limiter) Check(ctx context.Context, r keyfunc.Request) (Decision, error) {
	return l.CheckWith(ctx, r, Call{})
}

// CheckWith is Check with a cost and a key override.
func (l *Limiter) CheckWith(ctx context.Context, r keyfunc.Request, c Call) (Decision, error) {
	var d Decision
	if err := l.Decide(ctx, r, c, &d); err != nil {
		return Decision{}, err
	}
	d.Results = slices.Clone(d.Results) // d is returned by value: no aliasing of d.buf
	return d, nil
}

// Decide is CheckWith writing into d, which adapters allocate once per
// request (d then holds up to two results without another allocation). d
// must not be copied afterwards.
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
		return fmt.Errorf("sluice: %w: %d", ErrInvalidCost, cost)
	}
	if l.cfg.idem != nil {
		if v := r.Header(l.cfg.idem.Header); v != "" {
			if err := l.idempotent(ctx, r, c, cost, d, v); err != nil {
				return err
			}
			l.hooks(ctx, r, d)
			return nil
		}
	}
	if err := l.decide(ctx, r, c.Key, cost, d); err != nil {
		return err
	}
	l.hooks(ctx, r, d)
	return nil
}

// Peek reports r's state under every matching policy without counting it.
func (l *Limiter) Peek(ctx context.Context, r keyfunc.Request) (Decision, error) {
	var d Decision
	if err := l.decide(ctx, r, nil, 0, &d); err != nil {
		return Decision{}, err
	}
	d.Results = slices.Clone(d.Results)
	return d, nil
}

func (l *Limiter) decide(ctx context.Context, r keyfunc.Request, override keyfunc.Func, cost int64, d *Decision) error {
	set := l.set.Load()
	var idx []int
	if set.everyRequest {
		idx = set.allIdx()
	} else {
		idx = set.matched(r)
	}
	// Reset d field by field: Results[:len(idx)] are all written below, and
	// clearing d.buf too would cost a request a second zeroing of memory
	// the allocator has just zeroed.
	d.Allowed, d.Binding, d.Repeat = true, 0, false
	if len(idx) <= len(d.buf) {
		d.Results = d.buf[:len(idx)]
	} else {
		d.Results = make([]PolicyResult, len(idx))
	}
	if len(idx) == 0 {
		return nil
	}
	tier := ""
	if l.tiers != nil && set.anyTiers(idx) {
		tier = l.tiers.tier(ctx, r)
	}
	var ops []Op
	if len(idx) > 1 {
		ops = make([]Op, len(idx))
	}
	for j, i := range idx {
		p := &set.policies[i]
		id, err := p.identity(r, override)
		if err != nil {
			return err
		}
		lim := p.Limit
		if tl, ok := p.Tiers[tier]; ok {
			lim = tl
		}
		if ops != nil {
			ops[j] = Op{Key: id + p.suffix, Limit: lim, Cost: cost, Shadow: p.Shadow}
		}
		// Field by field: Result is written by the store below.
		pr := &d.Results[j]
		pr.Policy, pr.Limit, pr.Tier, pr.Shadow, pr.refund, pr.id, pr.cost = p.Name, lim, "", p.Shadow, p.Refund, id, cost
		if len(p.Tiers) > 0 {
			pr.Tier = tier
		}
	}
	if ops == nil { // one policy: one Take
		p := &d.Results[0]
		var res Result
		var err error
		if l.split != nil { // no key string built
			res, err = l.split.TakeSplit(ctx, p.id, p.Policy, p.Limit, cost)
		} else {
			res, err = l.store.Take(ctx, p.storeKey(), p.Limit, cost)
		}
		if err != nil {
			return fmt.Errorf("sluice: policy %q: %w", p.Policy, err)
		}
		p.Result = res
	} else if err := l.take(ctx, ops, d.Results); err != nil {
		return err
	}
	for j := range d.Results {
		if !d.Results[j].Allowed && !d.Results[j].Shadow && cost > 0 {
			d.Allowed = false
		}
	}
	d.Binding = binding(d.Results)
	return nil
}

// take decides several ops: all or nothing when the store is a BatchStore
// (a request denied by one policy consumes nothing from the others), one
// after another otherwise.
func (l *Limiter) take(ctx context.Context, ops []Op, out []PolicyResult) error {
	results := make([]Result, len(ops))
	if bs, ok := l.store.(BatchStore); ok {
		if err := bs.TakeAll(ctx, ops, results); err != nil {
			return fmt.Errorf("sluice: %w", err)
		}
	} else {
		for i, op := range ops {
			res, err := l.store.Take(ctx, op.Key, op.Limit, op.Cost)
			if err != nil {
				return fmt.Errorf("sluice: policy %q: %w", out[i].Policy, err)
			}
			results[i] = res
		}
	}
	for i := range out {
		out[i].Result = results[i]
	}
	return nil
}

// firstIdx lists 0..63, so allIdx needs no allocation for small sets.
var firstIdx = func() (a [64]int) {
	for i := range a {
		a[i] = i
	}
	return a
}()

func (set *policySet) allIdx() []int {
	if len(set.policies) <= len(firstIdx) {
		return firstIdx[:len(set.policies)]
	}
	idx := make([]int, len(set.policies))
	for i := range idx {
		idx[i] = i
	}
	return idx
}

func (set *policySet) anyMethods() bool {
	for i := range set.policies {
		if len(set.policies[i].Match.Methods) > 0 {
			return true
		}
	}
	return false
}

func (set *policySet) anyTiers(idx []int) bool {
	for _, i := range idx {
		if len(set.policies[i].Tiers) > 0 {
			return true
		}
	}
	return false
}

// Refund gives back the units of a checked request to the policies whose
// Refund matches the response status (and that counted it): each policy's
// admission, named by its Result.At, is undone exactly or not at all (see
// BatchStore.Refund). A Decision is refunded at most once: calling Refund
// again gives nothing more. Adapters call it after the response when the
// Decision is Refundable.
func (l *Limiter) Refund(ctx context.Context, d *Decision, status int) error {
	if !d.Allowed {
		return nil
	}
	bs, ok := l.store.(BatchStore)
	if !ok {
		return errors.New("sluice: Refund: the store cannot refund")
	}
	for i := range d.Results {
		p := &d.Results[i]
		if p.cost > 0 && p.Allowed && p.refund.matches(status) {
			if err := bs.Refund(ctx, p.storeKey(), p.Limit, p.cost, p.At); err != nil {
				return fmt.Errorf("sluice: policy %q: refund: %w", p.Policy, err)
			}
			p.cost = 0 // an admission is refunded once
		}
	}
	return nil
}

// Refundable reports whether some policy of d may give the request back
// after the response (so the adapter must watch its status).
func (d *Decision) Refundable() bool {
	for i := range d.Results {
		if d.Results[i].refund != RefundNever && d.Results[i].cost > 0 {
			return true
		}
	}
	return false
}

// Reset forgets identity's state under policy: its next request sees a
// fresh key. identity is what the policy's Key returns.
func (l *Limiter) Reset(ctx context.Context, policy, identity string) error {
	set := l.set.Load()
	for i := range set.policies {
		if p := &set.policies[i]; p.Name == policy {
			if err := l.store.Reset(ctx, identity+p.suffix, p.Limit); err != nil {
				return err
			}
			for _, tl := range p.Tiers {
				if err := l.store.Reset(ctx, identity+p.suffix, tl); err != nil {
					return err
				}
			}
			return nil
		}
	}
	return fmt.Errorf("sluice: Reset: no policy %q", policy)
}

// identity returns the identity of a request under p (its store key is the
// identity, NUL, and the policy's name).
func (p *compiledPolicy) identity(r keyfunc.Request, override keyfunc.Func) (string, error) {
	f := p.Key
	if override != nil {
		f = override
	}
	id, err := f(r)
	if err == nil && id == "" {
		err = ErrNoKey
	}
	if err != nil {
		return "", fmt.Errorf("sluice: policy %q: key: %w", p.Name, err)
	}
	return id, nil
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

// binding picks the most constraining result; shadow policies bind only
// when every policy is a shadow.
func binding(rs []PolicyResult) int {
	best := 0
	for i := 1; i < len(rs); i++ {
		if rs[i].Shadow != rs[best].Shadow {
			if rs[best].Shadow {
				best = i
			}
			continue
		}
		a, b := &rs[i].Result, &rs[best].Result
		switch {
		case !a.Allowed && b.Allowed:
			best = i
		case !a.Allowed && !b.Allowed:
			if a.RetryAfter > b.RetryAfter {
				best = i
			}
		case a.Allowed && b.Allowed:
			// a.Remaining/a.Limit < b.Remaining/b.Limit, in integers
			if a.Remaining*b.Limit < b.Remaining*a.Limit {
				best = i
			}
		}
	}
	return best
}

// SetOverride gives identity a different limit under policy until until (a
// temporary raise for a customer, say). The store must be an
// OverrideStore; with Redis every instance sees it at once.
func (l *Limiter) SetOverride(ctx context.Context, policy, identity string, lim Limit, until time.Time) error {
	return l.override(ctx, policy, identity, func(os OverrideStore, key string) error {
		if lim == (Limit{}) {
			return fmt.Errorf("sluice: SetOverride: %w: a zero Limit (use Block)", ErrInvalidLimit)
		}
		return os.SetOverride(ctx, key, Override{Limit: lim, Until: until})
	})
}

// Block denies every request of identity under policy until until.
func (l *Limiter) Block(ctx context.Context, policy, identity string, until time.Time) error {
	return l.override(ctx, policy, identity, func(os OverrideStore, key string) error {
		return os.SetOverride(ctx, key, Override{Until: until})
	})
}

// ClearOverride ends identity's override or block under policy.
func (l *Limiter) ClearOverride(ctx context.Context, policy, identity string) error {
	return l.override(ctx, policy, identity, func(os OverrideStore, key string) error {
		return os.ClearOverride(ctx, key)
	})
}

func (l *Limiter) override(_ context.Context, policy, identity string, f func(OverrideStore, string) error) error {
	os, ok := l.store.(OverrideStore)
	if !ok {
		return errors.New("sluice: the store does not keep overrides")
	}
	if identity == "" {
		return fmt.Errorf("sluice: override: %w", ErrNoKey)
	}
	set := l.set.Load()
	for i := range set.policies {
		if p := &set.policies[i]; p.Name == policy {
			if err := f(os, identity+p.suffix); err != nil {
				return fmt.Errorf("sluice: policy %q: %w", policy, err)
			}
			return nil
		}
	}
	return fmt.Errorf("sluice: override: no policy %q", policy)
}
