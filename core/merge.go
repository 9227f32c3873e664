package core

// Merge returns the Decision of a request that two Limiters decided, one
// after the other: a global middleware's earlier, then a per-route one's
// later (stacked middlewares or interceptors). It is what the request's
// clients and handlers should see: Allowed only if both allowed, Results
// of both (earlier's first), Binding the most constraining of them by the
// rule a Limiter uses for its own policies (among denials the longest
// RetryAfter, else the fewest Remaining, then the longest ResetAfter;
// shadows bind only when every policy is a shadow), Repeat only if both
// were repeats, and Skipped of both.
//
// The merge is a view for headers and handlers, not an admission: its
// Results give nothing back to Limiter.Refund and it is never Refundable.
// Each middleware refunds its own Decision. earlier and later are not
// modified, and the merge holds no identity (no request memory), so it may
// be kept; its Skipped may be shared with them (do not modify it). A nil
// argument stands for no Decision: Merge then returns the other one (nil
// if both are nil). Merge allocates the merged Decision; a request with a
// single middleware never calls it.
func Merge(earlier, later *Decision) *Decision {
	if earlier == nil || !earlier.Limited() {
		return later
	}
	if later == nil || !later.Limited() {
		return earlier
	}
	m := &Decision{
		Allowed: earlier.Allowed && later.Allowed,
		Repeat:  earlier.Repeat && later.Repeat,
		Results: make([]PolicyResult, 0, len(earlier.Results)+len(later.Results)),
	}
	m.Results = append(append(m.Results, earlier.Results...), later.Results...)
	for i := range m.Results {
		m.Results[i].cost = 0 // refunded by the Decision that counted it, only
		m.Results[i].id = ""
	}
	m.Binding = binding(m.Results)
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
