package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/rules"
)

// RuleUsage is where one caller stands under one native rule: the limit in
// force for it (the rule's, its tier's or an override's) and its counter,
// peeked.
type RuleUsage struct {
	// Rule is the rule.
	Rule *rules.Rule
	// Tier is the caller's tier ("" none), whether or not the rule has a
	// limit for it.
	Tier string
	// Limit is the limit in force for the caller now: the override's (the
	// zero Limit when it blocks), else the tier's when the rule has one for
	// the caller's tier, else the rule's. An unlimited rule's is zero; a
	// Deny rule's has Rate 0.
	Limit core.Limit
	// Override is the caller's override of the rule in force now; nil when
	// none.
	Override *rules.Override
	// Blocked: every check of the caller under the rule is denied, by a
	// block (an override with the zero Limit) or because the rule is a Deny
	// rule.
	Blocked bool
	// Capacity is the counter's capacity under the limit the store
	// applies (an override's, as the store holds it); Remaining what is
	// left now; Used = Capacity - Remaining. All zero while the caller is
	// blocked, and for unlimited and Deny rules, which count nothing.
	Capacity, Remaining, Used int64
	// ResetAt is when the caller's counter is full again (the end of a
	// block); zero when the rule counts nothing.
	ResetAt time.Time
	// State is the counter's warning state: Warning above 80% usage,
	// Throttled when a check of cost 1 would be denied now (blocked, or
	// nothing left).
	State core.State
}

// maxUsagePeek bounds the counters Usage peeks in one store call: with
// many rules (the admin API's 100 000), one call of them all held a Redis
// store for hundreds of milliseconds, stalling every instance's checks.
const maxUsagePeek = 512

// Usage reports where identifier, of dimension, stands under every native
// rule of that dimension, on every endpoint (rules with endpoint patterns
// included), in the order of the rules: the caller's tier and override
// resolved, the counters peeked (nothing is consumed) in store calls of at
// most 512 counters each, one Usage at a time per engine (so that reading
// many rules' usage never holds the store, a Redis shared by every
// instance, for long, nor makes it serve many such reads at once).
// A dimension no rule counts has none (nil, no error). Invalid input (an
// empty or too long dimension or identifier) wraps ErrInvalid naming the
// field; a store failure is an error wrapping the store's (for logs, not
// for a client).
func (e *Engine) Usage(ctx context.Context, dimension, identifier string) ([]RuleUsage, error) {
	if err := validCaller(dimension, identifier); err != nil {
		return nil, err
	}
	st := e.cur.Load()
	u := planUsage(st.snap, e.cfg.now(), dimension, identifier)
	if len(u.ops) == 0 {
		return u.out, nil
	}
	results, err := e.peekUsage(ctx, st, u.ops)
	if err != nil {
		return nil, err
	}
	for j, i := range u.memb {
		u.out[i].setCounter(&results[j])
	}
	return u.out, nil
}

// validCaller checks the dimension and identifier Usage is asked for.
func validCaller(dimension, identifier string) error {
	switch {
	case dimension == "":
		return invalid("dimension", "required")
	case len(dimension) > MaxDimension:
		return invalid("dimension", "at most %d bytes, got %d", MaxDimension, len(dimension))
	case identifier == "":
		return invalid("identifier", "required")
	case len(identifier) > MaxIdentifier:
		return invalid("identifier", "at most %d bytes, got %d", MaxIdentifier, len(identifier))
	}
	return nil
}

// usagePlan is a Usage before its counters are peeked: every rule's
// usage, and the ops that peek the counters of those that count.
type usagePlan struct {
	out  []RuleUsage
	ops  []core.GroupOp
	memb []int // out[memb[j]] is peeked by ops[j]
}

// planUsage resolves, at now, the limit in force for identifier under
// each native rule of dimension in s (its tier's, its override's) and
// plans a peek of the counter of each rule that counts.
func planUsage(s *rules.Snapshot, now time.Time, dimension, identifier string) usagePlan {
	var p usagePlan
	tier := s.TierOf(dimension, identifier)
	for _, r := range s.Rules() {
		if r.Envoy != nil || r.Dimension != dimension {
			continue
		}
		u := RuleUsage{Rule: r, Tier: tier, Limit: r.Limit}
		if tl, ok := r.Tiers[tier]; ok && tier != "" {
			u.Limit = tl
		}
		if o, ok := s.OverrideOf(r.ID, dimension, identifier); ok && o.Active(now) {
			u.Override, u.Limit, u.Blocked = &o, o.Limit, o.Blocks()
		}
		switch {
		case r.Unlimited:
			u.Limit, u.Override, u.Blocked = core.Limit{}, nil, false
		case r.Deny:
			u.Limit, u.Override, u.Blocked, u.State = r.Limit, nil, true, core.Throttled
		default:
			p.ops = append(p.ops, core.GroupOp{Policy: r.ID, Identity: identifier, Tier: tier})
			p.memb = append(p.memb, len(p.out))
		}
		p.out = append(p.out, u)
	}
	return p
}

// peekUsage peeks the counters of ops, once the Usage before has ended
// (or fails when ctx ends first), in store calls of at most maxUsagePeek.
func (e *Engine) peekUsage(ctx context.Context, st *state, ops []core.GroupOp) ([]core.PolicyResult, error) {
	select {
	case e.usage <- struct{}{}:
		defer func() { <-e.usage }()
	case <-ctx.Done():
		return nil, fmt.Errorf("engine: usage: %w", ctx.Err())
	}
	results := make([]core.PolicyResult, 0, len(ops))
	for lo := 0; lo < len(ops); lo += maxUsagePeek {
		d, err := st.decide(ctx, ops[lo:min(lo+maxUsagePeek, len(ops))], core.GroupCall{})
		if err != nil {
			return nil, fmt.Errorf("engine: usage: %w", err)
		}
		results = append(results, d.Results...)
	}
	return results, nil
}

// setCounter sets u's counter from p, its peek.
func (u *RuleUsage) setCounter(p *core.PolicyResult) {
	u.ResetAt = resetAt(&p.Result)
	u.State = p.State
	if u.Blocked { // no counter while blocked (the store answers with the rule's capacity)
		return
	}
	u.Capacity, u.Remaining = p.Capacity, p.Remaining
	u.Used = max(p.Capacity-p.Remaining, 0)
}
