package algo

// bucket is the meter shared by TokenBucket, LeakyBucket and GCRA.
//
// State: the TAT in units is Expire×Q - V, with Expire = ceil(TAT/Q) µs and
// 0 <= V < Q. The debt d = max(TAT - now, 0) is the used part of the bucket;
// a request needs cost×T more and is admitted if d + cost×T <= Full.
//
// book is the longest booking allowed, in µs (0: none; see Book). A booking
// is the take made at the slot s, the earliest whole µs at which the cost
// fits, s - now <= book: the TAT becomes max(TAT, s×Q) + cost×T, exactly as
// a request arriving at s would leave it, and the admission is recorded at
// s (Outcome.At).
//
// A key past the clamp (gap > maxGap: a clock stepped back by more than
// 2^53 units, about 9 s at Q = 10^9) is denied whatever the cost; its
// waits are exact all the same, in µs (see Micros): the debt gap×Q - V
// is past what an int64 product or a Lua number holds, the gap is not.
func (sp *Spec) bucket(st *State, o *Outcome, now, cost, book int64) {
	// The debt d, in units, and the warning state before: an expired key
	// is a fresh key.
	var d int64
	gap, prevState := st.Expire-now, st.State
	if gap > 0 {
		// A clock stepped back by years could overflow the product: such a
		// key is far beyond full either way (it is denied below, and its
		// TAT is never rewritten from the clamped debt).
		d = min(gap, sp.maxGap)*sp.Q - st.V
	} else {
		prevState = 0
	}
	beyond := gap > sp.maxGap
	if cost > sp.Capacity {
		reset := d
		if beyond { // full again once the gap has passed: V < Q, so at exactly Expire
			reset = Micros(gap)
		}
		never(o, sp.remaining(d), reset, prevState, now)
		return
	}
	if gap <= 0 {
		*st = State{}
	}
	need := max(cost, 1) * sp.T
	over := d - sp.Full + need // > 0: the units until the cost fits (in this order in Lua)
	allowed := over <= 0
	var delay, retry int64 // µs from now to the booked slot; the wait in units
	if !allowed && book > 0 {
		delay = (over + sp.Q - 1) / sp.Q
		allowed = delay <= book
	}
	switch {
	case beyond:
		allowed, delay = false, 0
		retry = Micros(sp.beyondWait(gap, need, st.V))
	case !allowed:
		retry, delay = over, 0
	default:
		retry = delay * sp.Q
		if cost > 0 {
			d = max(d, retry) + need
			sp.setDebt(st, now, d)
		}
	}
	reset := d
	if beyond {
		reset = Micros(gap)
	}
	state := sp.nextState(prevState, allowed, d)
	if cost > 0 {
		st.State = state
	}
	o.Allowed, o.Remaining, o.Retry, o.Reset = allowed, sp.remaining(d), retry, reset
	o.State, o.Previous, o.At = state, prevState, now+delay
}

// setDebt writes the TAT of debt d at now into st: Expire, the TAT
// rounded up to a whole µs, and V, what the rounding added, in units.
func (sp *Spec) setDebt(st *State, now, d int64) {
	if sp.Q == 1 {
		st.Expire, st.V = now+d, 0
		return
	}
	units := (d + sp.Q - 1) / sp.Q
	st.Expire, st.V = now+units, units*sp.Q-d
}

// remaining is the number of whole events a bucket of debt d admits now.
func (sp *Spec) remaining(d int64) int64 {
	if left := sp.Full - d; left >= sp.T { // no division for a full bucket
		return left / sp.T
	}
	return 0
}

// beyondWait is the wait in µs until need units fit in a bucket past the
// clamp, whose TAT is gap µs ahead less v units: the earliest whole r with
// (gap-r)×Q - v <= Full - need, and no earlier than the gap is back within
// the clamp. The sum is split so that Lua's doubles stay exact.
func (sp *Spec) beyondWait(gap, need, v int64) int64 {
	room := sp.Full - need
	return max(gap-(room/sp.Q+(room%sp.Q+v)/sp.Q), gap-sp.maxGap)
}

// settle computes the warning state from the consumption after the decision
// and stores it with the key unless the call was a peek.
func (sp *Spec) settle(st *State, o *Outcome, cost, used int64) {
	o.Previous = st.State
	o.State = sp.nextState(st.State, o.Allowed, used)
	if cost > 0 {
		st.State = o.State
	}
}
