package core

import (
	"context"
	"errors"
	"fmt"

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
}

// PolicyResult is the decision of one policy for one request.
type PolicyResult struct {
	Policy string
	Limit  Limit
	Result
}

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
}

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

// Limiter checks requests against its policies in a Store. Build one with
// NewLimiter; it is safe for concurrent use. Every adapter calls Check.
type Limiter struct {
	store         Store
	policies      []compiledPolicy
	onStateChange Hook
	onWarning     Hook
}

type compiledPolicy struct {
	Policy
	suffix string // "\x00" + name: the store key is identity + suffix
}

type limiterConfig struct {
	onStateChange, onWarning Hook
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
	l := &Limiter{store: store, onStateChange: c.onStateChange, onWarning: c.onWarning}
	seen := map[string]bool{}
	for i, p := range policies {
		if err := ValidPolicyName(p.Name); err != nil {
			return nil, fmt.Errorf("sluice: policy %d: %w", i, err)
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("sluice: policy %q: Name: duplicate", p.Name)
		}
		seen[p.Name] = true
		if p.Key == nil {
			return nil, fmt.Errorf("sluice: policy %q: Key: required (for example keyfunc.IP)", p.Name)
		}
		if err := p.Limit.Validate(); err != nil {
			return nil, fmt.Errorf("sluice: policy %q: %w", p.Name, err)
		}
		l.policies = append(l.policies, compiledPolicy{Policy: p, suffix: "\x00" + p.Name})
	}
	return l, nil
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

// Policies returns a copy of the Limiter's policies.
func (l *Limiter) Policies() []Policy {
	ps := make([]Policy, len(l.policies))
	for i := range l.policies {
		ps[i] = l.policies[i].Policy
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
	cost := c.Cost
	switch {
	case cost == 0:
		cost = 1
	case cost < 0:
		return Decision{}, fmt.Errorf("sluice: %w: %d", ErrInvalidCost, cost)
	}
	d := Decision{Allowed: true, Results: make([]PolicyResult, len(l.policies))}
	if len(l.policies) == 1 { // the common case: one Take, no batch
		p := &l.policies[0]
		key, err := p.key(r, c.Key)
		if err != nil {
			return Decision{}, err
		}
		res, err := l.store.Take(ctx, key, p.Limit, cost)
		if err != nil {
			return Decision{}, fmt.Errorf("sluice: policy %q: %w", p.Name, err)
		}
		d.Results[0] = PolicyResult{Policy: p.Name, Limit: p.Limit, Result: res}
		d.Allowed = res.Allowed
	} else if err := l.checkAll(ctx, r, c.Key, cost, &d); err != nil {
		return Decision{}, err
	}
	d.Binding = binding(d.Results)
	l.hooks(ctx, r, &d)
	return d, nil
}

// checkAll decides several policies all or nothing when the store is a
// BatchStore (a request denied by one policy consumes nothing from the
// others), one after another otherwise.
func (l *Limiter) checkAll(ctx context.Context, r keyfunc.Request, override keyfunc.Func, cost int64, d *Decision) error {
	ops := make([]Op, len(l.policies))
	for i := range l.policies {
		p := &l.policies[i]
		key, err := p.key(r, override)
		if err != nil {
			return err
		}
		ops[i] = Op{Key: key, Limit: p.Limit, Cost: cost}
	}
	results := make([]Result, len(ops))
	if bs, ok := l.store.(BatchStore); ok {
		if err := bs.TakeAll(ctx, ops, results); err != nil {
			return fmt.Errorf("sluice: %w", err)
		}
	} else {
		for i, op := range ops {
			res, err := l.store.Take(ctx, op.Key, op.Limit, op.Cost)
			if err != nil {
				return fmt.Errorf("sluice: policy %q: %w", l.policies[i].Name, err)
			}
			results[i] = res
		}
	}
	for i, res := range results {
		p := &l.policies[i]
		d.Results[i] = PolicyResult{Policy: p.Name, Limit: p.Limit, Result: res}
		if !res.Allowed {
			d.Allowed = false
		}
	}
	return nil
}

// key returns the store key of a request under p: its identity, NUL, and
// the policy's name.
func (p *compiledPolicy) key(r keyfunc.Request, override keyfunc.Func) (string, error) {
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
	return id + p.suffix, nil
}

func (l *Limiter) hooks(ctx context.Context, r keyfunc.Request, d *Decision) {
	if l.onStateChange == nil && l.onWarning == nil {
		return
	}
	for _, p := range d.Results {
		if p.State == p.Previous {
			continue
		}
		if l.onStateChange != nil {
			l.onStateChange(ctx, r, p)
		}
		if l.onWarning != nil && p.State == Warning {
			l.onWarning(ctx, r, p)
		}
	}
}

// binding picks the most constraining result.
func binding(rs []PolicyResult) int {
	best := 0
	for i := 1; i < len(rs); i++ {
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
