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
	var d int64
	gap := st.Expire - now
	if gap > 0 {
		// A clock stepped back by years could overflow the product: such a
		// key is far beyond full either way (it is denied below, and its
		// TAT is never rewritten from the clamped debt).
		d = min(gap, sp.maxGap)*sp.Q - st.V
	}
	beyond := gap > sp.maxGap
	reset := d
	if beyond { // full again once the gap has passed: V < Q, so at exactly Expire
		reset = Micros(gap)
	}
	prevState := st.State
	if gap <= 0 {
		prevState = 0 // an expired key is a fresh key
	}
	if cost > sp.Capacity {
		never(o, max(sp.Full-d, 0)/sp.T, reset, prevState, now)
		return
	}
	if gap <= 0 {
		*st = State{}
	}
	need := max(cost, 1) * sp.T
	over := d - sp.Full + need // > 0: the units until the cost fits (in this order in Lua)
	var delay int64            // µs from now to the booked slot
	if over > 0 && book > 0 {
		delay = (over + sp.Q - 1) / sp.Q
	}
	o.Allowed, o.Retry = (over <= 0 || book > 0 && delay <= book) && !beyond, 0
	switch {
	case !o.Allowed && beyond:
		o.Retry, delay = Micros(sp.beyondWait(gap, need, st.V)), 0
	case !o.Allowed:
		o.Retry, delay = over, 0
	case cost > 0:
		d = max(d, delay*sp.Q) + need
		if sp.Q == 1 {
			st.Expire, st.V = now+d, 0
		} else {
			units := (d + sp.Q - 1) / sp.Q
			st.Expire, st.V = now+units, units*sp.Q-d
		}
	}
	if o.Allowed {
		o.Retry = delay * sp.Q
	}
	o.Remaining, o.Reset, o.At = max(sp.Full-d, 0)/sp.T, d, now+delay
	if beyond {
		o.Reset = reset
	}
	sp.settle(st, o, cost, d)
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
