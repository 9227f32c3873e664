package engine

import (
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/rules"
)

// A Deny rule (rules.Rule.Deny: Envoy's requests_per_unit: 0, a ban list)
// has no policy and no counter: every check or descriptor it matches is
// denied (unless the rule is a shadow) without asking the store, and, all
// or nothing, the other rules of that call are only peeked.

// denial is the result of Deny rule r for a call decided at now: denied
// (a shadow rule's denial denies nothing), nothing counted, no capacity,
// nothing remaining, and RetryAfter and ResetAfter until the end of the
// current window of the rule's unit, windows aligned on the Unix epoch as
// a fixed window's are. A Deny rule without a period never admits:
// RetryNever. At is now, in whole microseconds, so that At + ResetAfter is
// the window's end exactly.
func denial(r *rules.Rule, now time.Time) core.PolicyResult {
	pr := core.PolicyResult{Policy: r.ID, Limit: r.Limit, Shadow: r.Shadow}
	pr.State, pr.Previous = core.Throttled, core.Throttled
	pr.At = now.UnixMicro()
	pr.RetryAfter = core.RetryNever
	if p := int64(r.Limit.Period); p > 0 {
		into := time.UnixMicro(pr.At).UnixNano() % p
		if into < 0 { // before the epoch
			into += p
		}
		pr.RetryAfter = time.Duration(p - into)
		pr.ResetAfter = pr.RetryAfter
	}
	return pr
}

// withDenials adds the results of Deny rules to d, a decision of the
// other rules of the same call (a peek when one of them denies): denied
// when denies is true, and bound by the most constraining result.
func withDenials(d *core.Decision, denied []core.PolicyResult, denies bool) {
	if len(denied) == 0 {
		return
	}
	d.Results = append(d.Results, denied...)
	if denies {
		d.Allowed, d.Repeat = false, false
	}
	d.Binding = binding(d.Results)
}

// deniedByRule reports whether a Deny rule that is not a shadow denied d.
func (st *state) deniedByRule(d *core.Decision) bool {
	if !st.deny {
		return false
	}
	for i := range d.Results {
		if p := &d.Results[i]; !p.Shadow {
			if r, ok := st.snap.Rule(p.Policy); ok && r.Deny {
				return true
			}
		}
	}
	return false
}
