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

// Retry is the wait of a denied Decision: that of its binding policy,
// which is the denying policy with the longest RetryAfter (a request passes
// only once every one of them admits it), and never when that policy can
// never admit it (its cost exceeds the capacity). It is zero for an allowed
// Decision.
func Retry(d *core.Decision) (wait time.Duration, never bool) {
	if d.Allowed || !d.Limited() {
		return 0, false
	}
	b := &d.Results[d.Binding]
	return b.RetryAfter, b.Never()
}
