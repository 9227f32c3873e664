package algo

import "github.com/sluicehq/sluice/core"

// Log is the state of a SlidingWindowLog key: the admissions of the last
// Period, oldest first, one entry per distinct instant. The zero value is an
// empty log. A Log is not safe for concurrent use.
type Log struct {
	// At and N are the instants (µs) and counts of the entries.
	At, N []int64
	// State is the warning state.
	State core.State
}

// Expire is the instant at which the log is empty again (0 if it is).
func (lg *Log) Expire(sp *Spec) int64 {
	if len(lg.At) == 0 {
		return 0
	}
	return lg.At[len(lg.At)-1] + sp.Period
}

// StepLog decides one request of a SlidingWindowLog key, updating lg in
// place and writing the decision to o. A decision is made at at = max(now,
// newest entry): the log never goes back behind its newest admission. It
// counts the entries of (at-Period, at]; an entry leaves the log for good
// only once it is a Period older than the newest entry (after a backward
// step, an entry older than now-Period may count again), and a peek changes
// nothing.
func (sp *Spec) StepLog(lg *Log, o *Outcome, now, cost int64) {
	P, rate := sp.Period, sp.Limit.Rate
	at := now
	if n := len(lg.At); n > 0 && lg.At[n-1] > at { // the clock stepped back
		at = lg.At[n-1]
	}
	skew := at - now
	first, total := lg.live(at - P)
	prevState := lg.State
	if total == 0 { // nothing counts: a fresh key (an emptied entry may remain)
		prevState = 0
	}
	var reset int64
	for i := len(lg.At) - 1; i >= first; i-- {
		if lg.N[i] > 0 { // the newest entry that counts
			reset = lg.At[i] + P - now
			break
		}
	}
	if cost > rate {
		never(o, rate-total, reset, prevState, at)
		return
	}
	need := max(cost, 1)
	allowed := total+need <= rate
	total2 := total
	if allowed && cost > 0 {
		total2 += cost
	}
	*o = Outcome{Allowed: allowed, Remaining: max(rate-total2, 0), State: sp.nextState(prevState, allowed, total2), Previous: prevState, At: at}
	if allowed && cost > 0 {
		o.Reset = at + P - now
	} else {
		o.Reset = reset
	}
	if !allowed {
		o.Retry = lg.retry(first, total-rate+need, P-at+skew)
	}
	if cost == 0 {
		return // a peek only looks
	}
	lg.State = o.State
	if allowed {
		lg.add(at, cost)
	}
	lg.prune(P)
}

// live returns the index of lg's first entry after since and the total
// of the entries from it on.
func (lg *Log) live(since int64) (first int, total int64) {
	for first < len(lg.At) && lg.At[first] <= since {
		first++
	}
	for _, n := range lg.N[first:] {
		total += n
	}
	return first, total
}

// retry is the wait until excess units of the entries from first have
// left the window: the instant of the entry whose leaving frees them,
// plus shift (Period less the decision's instant, plus its skew).
func (lg *Log) retry(first int, excess, shift int64) int64 {
	freed := int64(0)
	for i := first; i < len(lg.N); i++ {
		freed += lg.N[i]
		if freed >= excess {
			return lg.At[i] + shift
		}
	}
	return 0
}

// add records an admission of cost at at, lg's newest instant: in its
// newest entry when that is at at.
func (lg *Log) add(at, cost int64) {
	if n := len(lg.At); n > 0 && lg.At[n-1] == at {
		lg.N[n-1] += cost
	} else {
		lg.At, lg.N = append(lg.At, at), append(lg.N, cost)
	}
}

// prune drops the entries a Period older than the newest: no instant a
// decision can be made at (never behind the newest entry) counts them.
func (lg *Log) prune(P int64) {
	n := len(lg.At)
	if n == 0 {
		return
	}
	drop := 0
	for drop < n && lg.At[drop] <= lg.At[n-1]-P {
		drop++
	}
	if drop > 0 {
		lg.At, lg.N = append(lg.At[:0], lg.At[drop:]...), append(lg.N[:0], lg.N[drop:]...)
	}
}
