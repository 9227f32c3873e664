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
	// MissingKey says what a request gets when Key finds no identity for it
	// (ErrNoKey, an empty key, any other error, or a panic): SkipPolicy (the
	// default) decides the request under the other policies only;
	// DenyRequest denies it.
	MissingKey MissingKey
}

// MissingKey says what a policy does with a request it has no identity for.
type MissingKey uint8

const (
	// SkipPolicy leaves the policy out of the request's decision (the
	// default): the other policies still apply, and Decision.Skipped names
	// it. A request that every matching policy skips cannot be decided:
	// Check returns the key error.
	SkipPolicy MissingKey = iota
	// DenyRequest denies the request: its PolicyResult is Unidentified,
	// denied with RetryAfter RetryNever (no wait helps; an identity does),
	// and the other policies count nothing.
	DenyRequest
)

// String returns "skip" or "deny".
func (m MissingKey) String() string {
	switch m {
	case SkipPolicy:
		return "skip"
	case DenyRequest:
		return "deny"
	}
	return fmt.Sprintf("MissingKey(%d)", uint8(m))
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
	// Limit is the limit applied: the policy's, its tier's, or the
	// identity's override (see Limiter.SetOverride). A blocked identity (see
	// Limiter.Block) is described by the policy's (or tier's) limit, with
	// nothing remaining and RetryAfter and ResetAfter until the block ends.
	Limit Limit
	// Tier is the caller's tier when the policy has tiers.
	Tier string
	// Shadow: the policy is on trial; its denial did not deny the request.
	Shadow bool
	// Unidentified: the policy's Key found no identity for the request and
	// its MissingKey is DenyRequest. The store was not asked: the Result is
	// a denial with RetryAfter RetryNever.
	Unidentified bool
	refund       RefundWhen // next to Shadow: one word for them all
	Result
	id   string // the identity; the store key is id + "\x00" + Policy (see storeKey)
	cost int64
	base Limit // the policy's (or tier's) limit: the key's state is stored under it
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
	// Binding is the index in Results of the most constraining policy: if
	// some policy denied, the denying one with the longest RetryAfter;
	// otherwise the one with the fewest requests Remaining (on a tie, the
	// longest ResetAfter). Shadow policies bind only when every policy is a
	// shadow. It drives the headers.
	Binding int

	// Repeat: the request repeated an admitted one (same idempotency key)
	// and passed without being counted.
	Repeat bool

	// Skipped names the policies that matched the request but were left out
	// of its decision because their Key found no identity for it (see
	// MissingKey); nil if none. The names are the policies' own strings.
	Skipped []string

	buf     [2]PolicyResult // Results of up to two policies, without an allocation
	skipBuf [2]string       // Skipped, likewise
	idem    string          // the idempotency record a counted original wrote
	idemAt  int64           // and the instant it was written at
	sctx    detached        // the context of store calls (see storeContext)
}

// detached is a context with the values of its parent but not its
// cancellation or deadline: a decision that has begun is finished even when
// the client goes away, so that a request is always counted or refused. It
// lives in the Decision so that detaching costs no allocation.
type detached struct{ parent context.Context }

func (c *detached) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *detached) Done() <-chan struct{}       { return nil }
func (c *detached) Err() error                  { return nil }
func (c *detached) Value(key any) any           { return c.parent.Value(key) }
func (c *detached) String() string              { return "sluice.detached" }

// Limited reports whether any policy applied to the request.
func (d *Decision) Limited() bool { return len(d.Results) > 0 }

// Bound returns the most constraining result (zero if there is none).
func (d *Decision) Bound() PolicyResult {
	if d.Binding < len(d.Results) {
		return d.Results[d.Binding]
	}
	return PolicyResult{}
}

// State returns the most severe warning state over the policies that are
// not shadows: a policy on trial never changes what a client sees, so a
// Decision of shadow policies only is Normal.
func (d *Decision) State() State {
	s := Normal
	for i := range d.Results {
		if !d.Results[i].Shadow {
			s = max(s, d.Results[i].State)
		}
	}
	return s
}

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
	suffix  string   // "\x00" + name: the store key is identity + suffix
	methods []string // Match.Methods; nil when any method matches ("*")
}

// ValidMethod reports why m cannot be one of Match.Methods: it must be an
// RFC 9110 method token (GET, POST, PROPFIND, ...) written in one case, or
// "*" for any method. "ANY" and "ALL" are refused as the mistakes they
// usually are (write "*", or leave Methods empty), as are lists such as
// "GET,POST" or "GET POST" (give each method its own entry).
func ValidMethod(m string) error {
	if m == "*" {
		return nil
	}
	if m == "" {
		return errors.New("Methods: an empty method")
	}
	for i := 0; i < len(m); i++ {
		if !tchar(m[i]) {
			return fmt.Errorf("Methods: %q is not a method token (one method per entry; \"*\" for any)", m)
		}
	}
	if strings.ToUpper(m) != m && strings.ToLower(m) != m {
		return fmt.Errorf("Methods: %q mixes cases", m)
	}
	if strings.EqualFold(m, "ANY") || strings.EqualFold(m, "ALL") {
		return fmt.Errorf("Methods: %q is not a method (\"*\" or no Methods at all match every method)", m)
	}
	return nil
}

// tchar reports whether c may appear in an RFC 9110 token.
func tchar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
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
		return nil, errors.New("sluice: NewLimiter: nil store")
	}
	if len(policies) == 0 {
		return nil, errors.New("sluice: NewLimiter: no policies")
	}
	var c limiterConfig
	for _, o := range opts {
		o(&c)
	}
	if c.storeTimeout < 0 {
		return nil, fmt.Errorf("sluice: WithStoreTimeout: must be positive, got %s", c.storeTimeout)
	}
	if c.idem != nil {
		if err := c.idem.validate(store); err != nil {
			return nil, err
		}
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
		if p.MissingKey > DenyRequest {
			return fmt.Errorf("sluice: policy %q: MissingKey: must be SkipPolicy or DenyRequest, got %d", p.Name, p.MissingKey)
		}
		for tier, tl := range p.Tiers {
			if tier == "" {
				return fmt.Errorf("sluice: policy %q: Tiers: a tier named \"\" (callers without a tier get Limit)", p.Name)
			}
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
		anyMethod := false
		for _, m := range p.Match.Methods {
			if err := ValidMethod(m); err != nil {
				return fmt.Errorf("sluice: policy %q: %w", p.Name, err)
			}
			anyMethod = anyMethod || m == "*"
		}
		p.Shadow = p.Shadow || c.shadow
		cp := compiledPolicy{Policy: p, suffix: "\x00" + p.Name}
		if !anyMethod {
			cp.methods = p.Match.Methods
		}
		set.policies = append(set.policies, cp)
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
		if ms := set.policies[i].methods; len(ms) > 0 {
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
	sctx, cancel := l.storeContext(ctx, d)
	if cancel != nil {
		defer cancel()
	}
	if err := l.prepare(ctx, r, c.Key, cost, d); err != nil {
		return err
	}
	if i := l.cfg.idem; i != nil && len(d.Results) > 0 {
		if v := r.Header(i.Header); v != "" {
			if err := l.idempotent(sctx, r, cost, d, v); err != nil {
				return err
			}
			l.hooks(ctx, r, d)
			return nil
		}
	}
	if err := l.run(sctx, d, nil, nil); err != nil {
		return err
	}
	l.hooks(ctx, r, d)
	return nil
}

// storeContext returns the context of d's store calls: ctx's values without
// its cancellation (see detached), bounded by WithStoreTimeout if set. It
// allocates nothing unless the Limiter has a store timeout.
func (l *Limiter) storeContext(ctx context.Context, d *Decision) (context.Context, context.CancelFunc) {
	if ctx.Done() == nil { // nothing to detach from (context.Background, say)
		if l.cfg.storeTimeout > 0 {
			return context.WithTimeout(ctx, l.cfg.storeTimeout)
		}
		return ctx, nil
	}
	d.sctx.parent = ctx
	if l.cfg.storeTimeout > 0 {
		return context.WithTimeout(&d.sctx, l.cfg.storeTimeout)
	}
	return &d.sctx, nil
}

// Peek reports r's state under every matching policy without counting it.
// Its Decision's Allowed reports whether a request of cost 1 would be
// admitted now by every policy that is not a shadow.
func (l *Limiter) Peek(ctx context.Context, r keyfunc.Request) (Decision, error) {
	var d Decision
	sctx, cancel := l.storeContext(ctx, &d)
	if cancel != nil {
		defer cancel()
	}
	if err := l.prepare(ctx, r, nil, 0, &d); err != nil {
		return Decision{}, err
	}
	if err := l.run(sctx, &d, nil, nil); err != nil {
		return Decision{}, err
	}
	d.detach()
	return d, nil
}

// detach makes d safe to copy: its slices no longer point into d itself.
func (d *Decision) detach() {
	d.Results = slices.Clone(d.Results)
	if d.Skipped != nil {
		d.Skipped = slices.Clone(d.Skipped)
	}
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
	d.Allowed, d.Binding, d.Repeat, d.Skipped, d.idem = true, 0, false, nil, ""
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
	n, denied := 0, false
	var keyErr error
	keyPolicy := ""
	for _, i := range idx {
		p := &set.policies[i]
		id, err := p.identity(r, override)
		if err != nil && p.MissingKey == SkipPolicy {
			if d.Skipped == nil {
				d.Skipped = d.skipBuf[:0]
			}
			d.Skipped = append(d.Skipped, p.Name)
			if keyErr == nil {
				keyErr, keyPolicy = err, p.Name
			}
			continue
		}
		lim := p.Limit
		if tl, ok := p.Tiers[tier]; ok {
			lim = tl
		}
		// Field by field: Result is written by the store, or below.
		pr := &d.Results[n]
		n++
		pr.Policy, pr.Limit, pr.base, pr.Tier, pr.Shadow, pr.refund, pr.id, pr.cost = p.Name, lim, lim, "", p.Shadow, p.Refund, id, cost
		pr.Unidentified = err != nil
		if len(p.Tiers) > 0 {
			pr.Tier = tier
		}
		if pr.Unidentified {
			pr.cost = 0
			pr.Result = Result{Limit: lim.Capacity(), RetryAfter: RetryNever, State: Throttled, Previous: Throttled}
			denied = denied || !p.Shadow
		}
	}
	d.Results = d.Results[:n]
	if n == 0 {
		return fmt.Errorf("sluice: policy %q: key: %w", keyPolicy, keyErr)
	}
	if denied { // the request is denied: the others count nothing
		for j := range d.Results {
			d.Results[j].cost = 0
		}
	}
	return nil
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
	case m == 1 && extra == nil: // one Take
		var p *PolicyResult
		for j := range d.Results {
			if !d.Results[j].Unidentified {
				p = &d.Results[j]
			}
		}
		var res Result
		var err error
		if l.split != nil { // no key string built
			res, err = l.split.TakeSplit(ctx, p.id, p.Policy, p.base, p.cost)
		} else {
			res, err = l.store.Take(ctx, p.storeKey(), p.base, p.cost)
		}
		if err != nil {
			return fmt.Errorf("sluice: policy %q: %w", p.Policy, err)
		}
		p.Result = res
	default:
		if err := l.take(ctx, d.Results, m, extra, extraRes); err != nil {
			return err
		}
	}
	for j := range d.Results {
		p := &d.Results[j]
		p.Limit = p.base
		if p.Applied != nil { // an override's limit applied
			p.Limit = *p.Applied
		}
		if !p.Allowed && !p.Shadow {
			d.Allowed = false
		}
	}
	d.Binding = binding(d.Results)
	return nil
}

// take decides the m identified results of rs, and extra: all or nothing
// when the store is a BatchStore (a request denied by one policy consumes
// nothing from the others), one after another otherwise.
func (l *Limiter) take(ctx context.Context, rs []PolicyResult, m int, extra *Op, extraRes *Result) error {
	n := m
	if extra != nil {
		n++
	}
	ops := make([]Op, 0, n)
	where := make([]int, 0, n) // ops[k] decides rs[where[k]]
	for j := range rs {
		if p := &rs[j]; !p.Unidentified {
			ops = append(ops, Op{Key: p.storeKey(), Limit: p.base, Cost: p.cost, Shadow: p.Shadow})
			where = append(where, j)
		}
	}
	if extra != nil {
		ops = append(ops, *extra)
	}
	results := make([]Result, len(ops))
	if bs, ok := l.store.(BatchStore); ok {
		if err := bs.TakeAll(ctx, ops, results); err != nil {
			return fmt.Errorf("sluice: %w", err)
		}
	} else {
		for k, op := range ops {
			res, err := l.store.Take(ctx, op.Key, op.Limit, op.Cost)
			if err != nil {
				if k < len(where) {
					return fmt.Errorf("sluice: policy %q: %w", rs[where[k]].Policy, err)
				}
				return fmt.Errorf("sluice: %w", err)
			}
			results[k] = res
		}
	}
	for k, j := range where {
		rs[j].Result = results[k]
	}
	if extra != nil {
		*extraRes = results[len(ops)-1]
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
		if len(set.policies[i].methods) > 0 {
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
// BatchStore.Refund), on the state it was made on: an admission under an
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
	bs, ok := l.store.(BatchStore)
	if !ok {
		return errors.New("sluice: Refund: the store cannot refund")
	}
	ctx = context.WithoutCancel(ctx)
	if l.cfg.storeTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.cfg.storeTimeout)
		defer cancel()
	}
	refunded := false
	for i := range d.Results {
		p := &d.Results[i]
		if p.cost > 0 && p.Allowed && p.refund.matches(status) {
			if p.Applied != nil && p.Override == 0 {
				// An override the store cannot name: its state cannot be
				// found, and the key's own state did not count this request.
				p.cost = 0
				continue
			}
			if err := bs.Refund(ctx, p.storeKey(), p.base, p.cost, p.At, p.Override); err != nil {
				return fmt.Errorf("sluice: policy %q: refund: %w", p.Policy, err)
			}
			p.cost = 0 // an admission is refunded once
			refunded = true
		}
	}
	if refunded && d.idem != "" && l.cfg.idem != nil {
		rec := d.idem
		d.idem = "" // refunded once
		if err := bs.Refund(ctx, rec, l.cfg.idem.first(), 1, d.idemAt, 0); err != nil {
			return fmt.Errorf("sluice: idempotency: refund: %w", err)
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
// identity, NUL, and the policy's name). A key function that panics is a key
// error: one bad request must not bring the process down.
func (p *compiledPolicy) identity(r keyfunc.Request, override keyfunc.Func) (string, error) {
	f := p.Key
	if override != nil {
		f = override
	}
	id, err := callKey(f, r)
	if err == nil && id == "" {
		err = ErrNoKey
	}
	if err != nil { // wrapped by the caller, only if it returns it
		return "", err
	}
	return id, nil
}

// callKey calls f, turning a panic into an error.
func callKey(f keyfunc.Func, r keyfunc.Request) (id string, err error) {
	defer func() {
		if v := recover(); v != nil {
			id, err = "", fmt.Errorf("key function panicked: %v", v)
		}
	}()
	return f(r)
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

// binding picks the most constraining result: among denials, the longest
// RetryAfter; among admissions, the fewest Remaining, then the longest
// ResetAfter. Shadow policies bind only when every policy is a shadow.
func binding(rs []PolicyResult) int {
	best := 0
	for i := 1; i < len(rs); i++ {
		if rs[i].Shadow != rs[best].Shadow {
			if rs[best].Shadow {
				best = i
			}
			continue
		}
		if tighter(&rs[i].Result, &rs[best].Result) {
			best = i
		}
	}
	return best
}

// tighter reports whether a constrains a request more than b.
func tighter(a, b *Result) bool {
	switch {
	case a.Allowed != b.Allowed:
		return !a.Allowed
	case !a.Allowed:
		return a.RetryAfter > b.RetryAfter
	case a.Remaining != b.Remaining:
		return a.Remaining < b.Remaining
	}
	return a.ResetAfter > b.ResetAfter
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
