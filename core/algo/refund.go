package algo

import "github.com/sluicehq/sluice/core"

// Refund undoes the admission of cost units that a step decided at instant
// at (its Outcome.At), on a key's state at now: exactly that admission, or,
// when that is impossible, nothing (see the package doc, "Refunds"). It
// never takes a key below its fresh state and never lets it admit more than
// its Limit promises. The warning state follows the lower usage. An
// admission must be refunded at most once: the state does not record which
// admissions were refunded.
func (sp *Spec) Refund(st *State, now, cost, at int64) {
	if cost <= 0 {
		return
	}
	switch sp.Algorithm {
	case core.FixedWindow:
		sp.fixedRefund(st, now, cost, at)
	case core.SlidingWindowCounter:
		sp.counterRefund(st, now, cost, at)
	case core.SlidingWindowLog:
		panic("algo: Refund called for sliding_window_log; use RefundLog")
	default:
		sp.bucketRefund(st, now, cost, at, -1)
	}
}

// Undo undoes the admission of cost that a step has just decided on a key
// (o is its Outcome): as Refund of o.At, except that a bucket also uses the
// debt the admission left at its instant (o.Reset, less the wait o.Retry
// of a booking, whose instant is its slot), which bounds what it still
// holds: an admission made behind a deep debt comes back whole. The Redis
// store's all-or-nothing decisions across identities undo an admission
// this way (lua/refund.lua) when the key was written since; otherwise they
// restore the state the admission was made on exactly. The memory store
// decides such groups atomically.
func (sp *Spec) Undo(st *State, now, cost int64, o *Outcome) {
	if cost <= 0 {
		return
	}
	if sp.Algorithm.Bucket() {
		sp.bucketRefund(st, now, cost, o.At, max(o.Reset-max(o.Retry, 0), 0))
		return
	}
	sp.Refund(st, now, cost, o.At)
}

// UndoLog is Undo for SlidingWindowLog: RefundLog of o.At. (An emptied
// newest entry stays, as for any refund: it counts nothing and changes no
// Result, but keeps the instant the key records.)
func (sp *Spec) UndoLog(lg *Log, now, cost int64, o *Outcome) {
	sp.RefundLog(lg, now, cost, o.At)
}

// undrained returns x - el×Q, at least 0, without overflow.
func (sp *Spec) undrained(x, el int64) int64 {
	switch {
	case el <= 0:
		return x
	case el >= (x+sp.Q-1)/sp.Q:
		return 0
	}
	return x - el*sp.Q
}

// bucketRefund moves the TAT back by the part of the admission that has not
// drained yet, as if it had been poured into an empty bucket at at:
// cost×T - (t - at)×Q, clamped to [0, cost×T], where t is the latest instant
// the key is known to have seen: now, at, or TAT - Full (the last admission
// left the TAT at most Full ahead of its instant). That is never more than
// the admission still holds, whatever came before or after it, as long as no
// admission after it was made at an instant after t (see the package doc,
// "Refunds"), so the bucket never ends below the state it would have had
// without the admission. A state beyond the clamp of a large backward step
// gives nothing.
func (sp *Spec) bucketRefund(st *State, now, cost, at, after int64) {
	gap := st.Expire - now
	if gap <= 0 || gap > sp.maxGap {
		return
	}
	d := gap*sp.Q - st.V
	el := max(now, at) - at
	if d > sp.Full { // the clock stepped back behind the last admission
		el = max(el, now+(d-sp.Full+sp.Q-1)/sp.Q-at)
	}
	whole := min(cost, sp.Capacity) * sp.T
	r := sp.undrained(whole, el)
	if after >= 0 { // Undo: the debt the admission left bounds it too
		r = max(r, min(whole, sp.undrained(after, el)))
	}
	if r == 0 {
		return // drained
	}
	d2 := max(d-r, 0)
	if d2 == 0 {
		*st = State{}
		return
	}
	state := sp.nextState(st.State, true, d2)
	units := (d2 + sp.Q - 1) / sp.Q
	*st = State{Expire: now + units, V: units*sp.Q - d2, State: state}
}

// fixedRefund takes cost from the count if at is in the key's current
// window (the stored one, if the clock stepped back behind it).
func (sp *Spec) fixedRefund(st *State, now, cost, at int64) {
	end := (now/sp.Period + 1) * sp.Period
	switch {
	case st.Expire > end:
		end = st.Expire
	case st.Expire < end:
		return // the stored window is over
	}
	if st.V == 0 || at < 0 || (at/sp.Period+1)*sp.Period != end {
		return // not an admission of this window
	}
	c2 := max(st.V-cost, 0)
	if c2 == 0 {
		*st = State{}
		return
	}
	*st = State{Expire: end, V: c2, State: sp.nextState(st.State, true, c2)}
}

// counterRefund takes cost from the count of the window at fell in: the
// current one or the previous one; an older admission no longer counts.
func (sp *Spec) counterRefund(st *State, now, cost, at int64) {
	w, p, c, state := sp.counterLoad(st, now)
	if at < 0 || p == 0 && c == 0 {
		return
	}
	switch at / sp.Period {
	case w:
		c -= min(c, cost)
	case w - 1:
		p -= min(p, cost)
	default:
		return
	}
	if p == 0 && c == 0 {
		*st = State{}
		return
	}
	e := max(now-w*sp.Period, 0)
	*st = State{Expire: (w + 2) * sp.Period, V: p<<32 | c, State: sp.nextState(state, true, p*(sp.Period-e)+c*sp.Period)}
}

// RefundLog is Refund for SlidingWindowLog: it takes cost units from the
// entry at instant at, if that entry still counts (it is in the window of
// max(now, newest entry)); from no other. The newest entry stays, even
// emptied, while others count: it is the instant the key records, and a
// decision after a backward step must not be made behind it. An emptied
// entry counts nothing and changes no Result (ResetAfter is measured from
// the newest entry that counts).
func (sp *Spec) RefundLog(lg *Log, now, cost, at int64) {
	if cost <= 0 || len(lg.At) == 0 {
		return
	}
	t := max(now, lg.At[len(lg.At)-1])
	k := len(lg.At) - 1
	for k >= 0 && lg.At[k] > at {
		k--
	}
	if k < 0 || lg.At[k] != at || at <= t-sp.Period {
		return // gone, or never there
	}
	if lg.N[k] -= min(cost, lg.N[k]); lg.N[k] == 0 && k < len(lg.At)-1 {
		lg.At, lg.N = append(lg.At[:k], lg.At[k+1:]...), append(lg.N[:k], lg.N[k+1:]...)
	}
	lg.prune(sp.Period)
	var total int64
	for i, n := range lg.N {
		if lg.At[i] > t-sp.Period {
			total += n
		}
	}
	if total == 0 { // nothing counts any more: the key is fresh
		lg.At, lg.N, lg.State = lg.At[:0], lg.N[:0], 0
		return
	}
	lg.State = sp.nextState(lg.State, true, total)
}
