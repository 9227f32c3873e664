package algo

import "github.com/sluicehq/sluice/core"

// bucket is the meter shared by TokenBucket, LeakyBucket and GCRA.
//
// State: the TAT in units is Expire×Q - V, with Expire = ceil(TAT/Q) µs and
// 0 <= V < Q. The debt d = max(TAT - now, 0) is the used part of the bucket;
// a request needs cost×T more and is admitted if d + cost×T <= Full.
func (sp *Spec) bucket(st State, now, cost int64) (State, Outcome) {
	var d int64
	if gap := st.Expire - now; gap > 0 {
		// A clock stepped back by years could overflow the product: such a
		// key is far beyond full either way.
		d = min(gap, core.MaxExact/sp.Q)*sp.Q - st.V
	} else {
		st = State{}
	}
	if cost > sp.Capacity {
		return st, never(Outcome{Remaining: max(sp.Full-d, 0) / sp.T, Reset: d})
	}
	need := max(cost, 1) * sp.T
	o := Outcome{Allowed: d+need <= sp.Full}
	switch {
	case !o.Allowed:
		o.Retry = d + need - sp.Full
	case cost > 0:
		d += need
		units := (d + sp.Q - 1) / sp.Q
		st.Expire, st.V = now+units, units*sp.Q-d
	}
	o.Remaining, o.Reset = max(sp.Full-d, 0)/sp.T, d
	return sp.settle(st, o, cost, d)
}

// settle computes the warning state from the consumption after the decision
// and stores it with the key unless the call was a peek.
func (sp *Spec) settle(st State, o Outcome, cost, used int64) (State, Outcome) {
	o.Level = sp.level(st.Level, o.Allowed, used)
	if cost > 0 {
		st.Level = o.Level
	}
	return st, o
}
