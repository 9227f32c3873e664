package algo

import "github.com/sluicehq/sluice/core"

// Refund gives back cost units of earlier admissions to a key's state, as if
// they had not been made, never taking it below its fresh state. The warning
// state follows the lower usage. It is the inverse of an admission made at
// or before now; it serves all-or-nothing decisions across stores and
// response-based refunds.
func (sp *Spec) Refund(st *State, now, cost, at int64) {
	if cost <= 0 {
		return
	}
	switch sp.Algorithm {
	case core.FixedWindow:
		sp.fixedRefund(st, now, cost)
	case core.SlidingWindowCounter:
		sp.counterRefund(st, now, cost)
	case core.SlidingWindowLog:
		panic("algo: Refund called for sliding_window_log; use RefundLog")
	default:
		sp.bucketRefund(st, now, cost)
	}
}

func (sp *Spec) bucketRefund(st *State, now, cost int64) {
	gap := st.Expire - now
	if gap <= 0 {
		return
	}
	d := min(gap, sp.maxGap)*sp.Q - st.V
	d2 := max(d-cost*sp.T, 0)
	if d2 == 0 {
		*st = State{}
		return
	}
	lvl := sp.level(st.Level, true, d2)
	units := (d2 + sp.Q - 1) / sp.Q
	*st = State{Expire: now + units, V: units*sp.Q - d2, Level: lvl}
}

func (sp *Spec) fixedRefund(st *State, now, cost int64) {
	end := (now/sp.Period + 1) * sp.Period
	count := st.V
	switch {
	case st.Expire > end:
		end = st.Expire
	case st.Expire < end:
		count = 0
	}
	if count == 0 {
		return
	}
	c2 := max(count-cost, 0)
	if c2 == 0 {
		*st = State{}
		return
	}
	*st = State{Expire: end, V: c2, Level: sp.level(st.Level, true, c2)}
}

func (sp *Spec) counterRefund(st *State, now, cost int64) {
	w, p, c, lvl := sp.counterLoad(st, now)
	fromC := min(c, cost)
	c -= fromC
	p = max(p-(cost-fromC), 0)
	if p == 0 && c == 0 {
		*st = State{}
		return
	}
	e := max(now-w*sp.Period, 0)
	*st = State{Expire: (w + 2) * sp.Period, V: p<<32 | c, Level: sp.level(lvl, true, p*(sp.Period-e)+c*sp.Period)}
}

// RefundLog gives back cost units of a log, from its newest entries.
func (sp *Spec) RefundLog(lg *Log, now, cost, at int64) {
	if cost <= 0 {
		return
	}
	t := now
	if n := len(lg.At); n > 0 && lg.At[n-1] > t {
		t = lg.At[n-1]
	}
	drop := 0
	for drop < len(lg.At) && lg.At[drop] <= t-sp.Period {
		drop++
	}
	lg.At, lg.N = append(lg.At[:0], lg.At[drop:]...), append(lg.N[:0], lg.N[drop:]...)
	if len(lg.At) == 0 {
		lg.Level = 0
		return
	}
	var total int64
	for _, n := range lg.N {
		total += n
	}
	for cost > 0 && len(lg.At) > 0 {
		k := len(lg.At) - 1
		take := min(cost, lg.N[k])
		cost -= take
		total -= take
		if lg.N[k] -= take; lg.N[k] == 0 {
			lg.At, lg.N = lg.At[:k], lg.N[:k]
		}
	}
	if len(lg.At) == 0 {
		lg.Level = 0
		return
	}
	lg.Level = sp.level(lg.Level, true, total)
}
