// Package rank holds the rule that picks, of a request's policy results,
// the one that binds: the most constraining, which its headers describe
// (core.Decision.Binding). core decides a Decision's binding with it, and
// the adapters' merge of stacked middlewares' Decisions decides the merge's
// with it, so that the two never differ. It is internal to sluice.
package rank

import "time"

// Result is what the rule reads of one policy's result.
type Result struct {
	Shadow     bool
	Allowed    bool
	RetryAfter time.Duration
	Remaining  int64
	ResetAfter time.Duration
}

// Binds reports whether a binds in place of b: a policy that is not a
// shadow over a shadow; otherwise a denial over an admission, among
// denials the longer RetryAfter, among admissions the fewer Remaining, then
// the longer ResetAfter. Of two that rank the same, neither binds in place
// of the other: a caller keeps the first.
func Binds(a, b Result) bool {
	switch {
	case a.Shadow != b.Shadow:
		return b.Shadow
	case a.Allowed != b.Allowed:
		return !a.Allowed
	case !a.Allowed:
		return a.RetryAfter > b.RetryAfter
	case a.Remaining != b.Remaining:
		return a.Remaining < b.Remaining
	}
	return a.ResetAfter > b.ResetAfter
}
