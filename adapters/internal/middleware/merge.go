package middleware

import (
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/rank"
)

// Merge returns the Decision of a request that two Limiters decided, one
// after the other: a global middleware's earlier, then a per-route one's
// later (stacked middlewares or interceptors). It is what the request's
// clients and handlers see: Allowed only if both allowed, Results of both
// (earlier's first), Binding the most constraining of them by the rule a
// Limiter uses for its own policies (package internal/rank), Repeat only if
// both were repeats, and Skipped of both.
//
// The merge is a view for headers and handlers, not an admission: its
// Results hold only their exported fields, so they give nothing back to
// Limiter.Refund and the merge is never Refundable. Each middleware refunds
// its own Decision. earlier and later are not modified, and the merge holds
// no identity (no request memory), so it may be kept; its Skipped may be
// shared with them (do not modify it). A nil argument stands for no
// Decision: Merge then returns the other one (nil if both are nil). Merge
// allocates the merged Decision; a request with a single middleware never
// calls it.
func Merge(earlier, later *core.Decision) *core.Decision {
	if earlier == nil || !earlier.Limited() {
		return later
	}
	if later == nil || !later.Limited() {
		return earlier
	}
	m := &core.Decision{
		Allowed: earlier.Allowed && later.Allowed,
		Repeat:  earlier.Repeat && later.Repeat,
		Results: make([]core.PolicyResult, 0, len(earlier.Results)+len(later.Results)),
	}
	for _, d := range [2]*core.Decision{earlier, later} {
		for i := range d.Results {
			m.Results = append(m.Results, shown(&d.Results[i]))
		}
	}
	for i := 1; i < len(m.Results); i++ {
		if rank.Binds(rankOf(&m.Results[i]), rankOf(&m.Results[m.Binding])) {
			m.Binding = i
		}
	}
	switch {
	case earlier.Skipped == nil:
		m.Skipped = later.Skipped
	case later.Skipped == nil:
		m.Skipped = earlier.Skipped
	default:
		m.Skipped = append(append(make([]string, 0, len(earlier.Skipped)+len(later.Skipped)), earlier.Skipped...), later.Skipped...)
	}
	return m
}

// shown is what a merge shows of p: its exported fields, without what its
// Limiter keeps to refund it (its identity and cost).
func shown(p *core.PolicyResult) core.PolicyResult {
	return core.PolicyResult{Policy: p.Policy, Limit: p.Limit, Tier: p.Tier, Shadow: p.Shadow, Unidentified: p.Unidentified, Result: p.Result}
}

// rankOf is what the binding rule reads of p.
func rankOf(p *core.PolicyResult) rank.Result {
	return rank.Result{Shadow: p.Shadow, Allowed: p.Allowed, RetryAfter: p.RetryAfter, Remaining: p.Remaining, ResetAfter: p.ResetAfter}
}
