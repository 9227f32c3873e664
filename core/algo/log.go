package algo

import "github.com/sluicehq/sluice/core"

// Log is the state of a SlidingWindowLog key: the admissions of the last
// Period, oldest first, one entry per distinct instant. The zero value is an
// empty log. A Log is not safe for concurrent use.
type Log struct {
	// At and N are the instants (µs) and counts of the entries.
	At, N []int64
	Level core.State
}

// Expire is the instant at which the log is empty again (0 if it is).
func (lg *Log) Expire(sp *Spec) int64 {
	if len(lg.At) == 0 {
		return 0
	}
	return lg.At[len(lg.At)-1] + sp.Period
}

// StepLog decides one request of a SlidingWindowLog key, updating lg in
// place and writing the decision to o. Entries older than the window are
// dropped first, except by a peek, which changes nothing.
func (sp *Spec) StepLog(lg *Log, o *Outcome, now, cost int64) {
	P, rate := sp.Period, sp.Limit.Rate
	at := now
	if n := len(lg.At); n > 0 && lg.At[n-1] > at { // the clock stepped back
		at = lg.At[n-1]
	}
	skew := at - now
	drop := 0
	for drop < len(lg.At) && lg.At[drop] <= at-P {
		drop++
	}
	live := Log{At: lg.At[drop:], N: lg.N[drop:], Level: lg.Level}
	if len(live.At) == 0 {
		live.Level = 0
	}
	var total int64
	for _, n := range live.N {
		total += n
	}
	var reset int64
	if n := len(live.At); n > 0 {
		reset = live.At[n-1] + P - now
	}
	if cost > rate {
		never(o, rate-total, reset, live.Level, at)
		return
	}
	if cost > 0 { // prune for good; a peek only looks
		if drop > 0 {
			lg.At, lg.N = append(lg.At[:0], live.At...), append(lg.N[:0], live.N...)
		}
		lg.Level = live.Level
	} else {
		lg = &live
	}
	need := max(cost, 1)
	allowed := total+need <= rate
	if allowed && cost > 0 {
		if n := len(lg.At); n > 0 && lg.At[n-1] == at {
			lg.N[n-1] += cost
		} else {
			lg.At, lg.N = append(lg.At, at), append(lg.N, cost)
		}
		total += cost
	}
	*o = Outcome{Allowed: allowed, Remaining: rate - total, Level: sp.level(lg.Level, allowed, total), Prev: lg.Level, At: at}
	if cost > 0 {
		lg.Level = o.Level
	}
	if n := len(lg.At); n > 0 {
		o.Reset = lg.At[n-1] + P - now
	}
	if !allowed {
		freed := int64(0)
		for i, n := range lg.N {
			freed += n
			if total-freed+need <= rate {
				o.Retry = lg.At[i] + P - at + skew
				break
			}
		}
	}
}
