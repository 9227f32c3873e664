package mw

import (
	"time"

	"github.com/sluicehq/sluice/core"
)

// Capacity is the capacity actually applied to p: the one the store
// reported deciding with (an override's, or a guard's local fallback's),
// else that of p.Limit, the policy's or its tier's (or an override's, when
// the Limiter reports it there).
func Capacity(p *core.PolicyResult) int64 {
	if p.Result.Capacity > 0 {
		return p.Result.Capacity
	}
	return p.Limit.Capacity()
}

// Retry is the wait of a denied Decision: the longest RetryAfter among the
// policies that denied it (a request passes only once every one of them
// admits it), and never when one of them can never admit it (its cost
// exceeds the capacity). It is zero for an allowed Decision.
func Retry(d *core.Decision) (wait time.Duration, never bool) {
	for i := range d.Results {
		p := &d.Results[i]
		if p.Allowed || p.Shadow {
			continue
		}
		if p.Never() {
			return core.RetryNever, true
		}
		wait = max(wait, p.RetryAfter)
	}
	return wait, false
}
