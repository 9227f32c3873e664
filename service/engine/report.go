package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/rules"
)

// Reset forgets the identifier's counters under every rule that applies to
// c (the native rules of its dimension matching its endpoint, or the rule
// it names), under the rules' limits and every tier's: its next check sees
// fresh keys (unlimited and Deny rules keep none). c.Cost is ignored.
// Invalid input wraps ErrInvalid.
func (e *Engine) Reset(ctx context.Context, c Check) error {
	st := e.cur.Load()
	c.Cost = 0
	r, err := e.validate(st, &c)
	if err != nil {
		return err
	}
	matched := st.snap.Match("", c.Dimension, c.Endpoint)
	if r != nil {
		matched = []*rules.Rule{r}
	}
	for _, m := range matched {
		if m.Unlimited || m.Deny { // no counter
			continue
		}
		if err := st.lim.Reset(ctx, m.ID, c.Identifier); err != nil {
			return fmt.Errorf("engine: reset: rule %q: %w", m.ID, err)
		}
	}
	return nil
}

// drainAttempts bounds how often Report retries taking what is left of a
// rule that concurrent checks keep taking from.
const drainAttempts = 3

// Report charges c's cost after the work it paid for was done (a cost known
// only then: tokens generated, bytes sent). It takes c.Cost as Check does;
// when that is more than some rule has left, it takes what each rule has
// left instead (up to c.Cost: the rule that denied drains to zero, the
// others are charged in full) and reports Allowed false, so that the
// caller's next check is denied until the rule refills. A check denied
// by a Deny rule takes nothing from any rule. Cost 0 peeks. Errors are
// Check's.
func (e *Engine) Report(ctx context.Context, c Check) (Result, error) {
	start := time.Now()
	d, err := e.report(ctx, &c)
	e.observe(ctx, KindReport, &c, nil, &d, start, err)
	if err != nil {
		return Result{}, err
	}
	return resultOf(d), nil
}

func (e *Engine) report(ctx context.Context, c *Check) (core.Decision, error) {
	st := e.cur.Load()
	var d core.Decision
	err := e.check(ctx, st, c, nil, nil, &d)
	if err != nil || d.Allowed || c.Cost == 0 || st.deniedByRule(&d) { // a Deny rule's denial takes nothing
		return d, err
	}
	drained := false
	for j := range d.Results {
		p := &d.Results[j]
		if p.Shadow || p.Unidentified || p.Source.Degraded() {
			continue
		}
		take := min(c.Cost, p.Remaining)
		for range drainAttempts {
			if take <= 0 {
				break
			}
			g, err := st.decide(ctx, []core.GroupOp{{Policy: p.Policy, Identity: c.Identifier, Tier: p.Tier, Cost: take}}, core.GroupCall{})
			if err != nil {
				return core.Decision{}, fmt.Errorf("engine: report: %w", err)
			}
			if g.Allowed {
				drained = true
				break
			}
			take = min(take, g.Results[0].Remaining)
		}
	}
	if !drained {
		return d, nil
	}
	// Report where the check stands now, denied.
	peek := *c
	peek.Cost, peek.IdempotencyKey = 0, ""
	var now core.Decision
	if err := e.check(ctx, st, &peek, nil, nil, &now); err != nil {
		return core.Decision{}, err
	}
	now.Allowed = false
	if len(now.Results) > 0 {
		b := &now.Results[now.Binding]
		if b.Allowed || b.RetryAfter == 0 { // the peek's cost 1 would pass: c's cost would not
			b.Allowed = false
			b.RetryAfter = d.Results[d.Binding].RetryAfter
		}
		b.State = core.Throttled
	}
	return now, nil
}
