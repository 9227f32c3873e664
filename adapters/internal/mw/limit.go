package mw

import "github.com/sluicehq/sluice/core"

// Capacity is the capacity actually applied to p: the one the store
// reported deciding with (an override's, or a guard's local fallback's),
// else that of p.Limit, the policy's or its tier's (or an override's, when
// the Limiter reports it there).
func Capacity(p *core.PolicyResult) int64 {
	if p.Result.Limit > 0 {
		return p.Result.Limit
	}
	return p.Limit.Capacity()
}
