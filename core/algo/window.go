package algo

import "github.com/sluicehq/sluice/core"

// fixedWindow counts events per aligned window [kP, (k+1)P).
//
// State: Expire is the end of the window the count belongs to, V the count.
func (sp *Spec) fixedWindow(st *State, o *Outcome, now, cost int64) {
	end := (now/sp.Period + 1) * sp.Period
	count := st.V
	switch {
	case st.Expire > end: // the clock stepped back: keep the newer window
		end = st.Expire
	case st.Expire < end: // the stored window is over
		count = 0
	}
	rate := sp.Limit.Rate
	var reset int64
	if count > 0 {
		reset = end - now
	}
	if cost > rate {
		prevState := st.State
		if count == 0 {
			prevState = 0
		}
		never(o, rate-count, reset, prevState, max(now, end-sp.Period))
		return
	}
	if count == 0 {
		*st = State{}
	}
	*o = Outcome{Allowed: st.V+max(cost, 1) <= rate, Reset: reset, At: max(now, end-sp.Period)}
	if o.Allowed && cost > 0 {
		st.Expire, st.V, o.Reset = end, st.V+cost, end-now
	}
	if !o.Allowed {
		o.Retry = end - now
	}
	o.Remaining = max(rate-st.V, 0)
	sp.settle(st, o, cost, st.V)
}

// slidingCounter is Cloudflare's two-window estimate.
//
// State: Expire = (w+2)×P where w is the index of the window of the current
// count (the key is fresh once the next window has passed); V packs the
// previous window's count (high 32 bits) and the current one (low 32 bits).
func (sp *Spec) slidingCounter(st *State, o *Outcome, now, cost int64) {
	P, rate := sp.Period, sp.Limit.Rate
	w, p, c, _ := sp.counterLoad(st, now)
	start := w * P
	e := max(now-start, 0)    // elapsed in the window
	skew := max(start-now, 0) // how far the clock stepped back
	used := p*(P-e) + c*P
	reset := func() int64 {
		switch {
		case c > 0: // until the end of the next window
			return skew + 2*P - e
		case p > 0:
			return skew + P - e
		}
		return 0
	}
	if cost > rate {
		prevState := st.State
		if p == 0 && c == 0 {
			prevState = 0
		}
		never(o, max(sp.Full-used, 0)/P, reset(), prevState, now+skew)
		return
	}
	if p == 0 && c == 0 {
		*st = State{}
	}
	need := max(cost, 1)
	*o = Outcome{Allowed: used+need*P <= sp.Full, At: now + skew}
	if o.Allowed && cost > 0 {
		c += cost
		used += cost * P
		st.Expire, st.V = (w+2)*P, p<<32|c
	}
	o.Reset = reset()
	if !o.Allowed {
		if c+need <= rate { // in this window, once the previous one has decayed enough
			o.Retry = skew + P - e - (rate-c-need)*P/p
		} else { // in the next window, as this window's count decays
			o.Retry = skew + 2*P - e - (rate-need)*P/c
		}
	}
	o.Remaining = max(sp.Full-used, 0) / P
	sp.settle(st, o, cost, used)
	if cost > 0 && !o.Allowed && o.State != o.Previous {
		// the warning state is written with the window decided in, so the key
		// records that instant (as the script does: one write of both)
		st.Expire, st.V = (w+2)*P, p<<32|c
	}
}

// counterLoad returns the window w a request at now falls in (the stored one
// if the clock stepped back), the previous and current counts as seen from
// w, and the warning state (Normal for a key that is fresh by now).
func (sp *Spec) counterLoad(st *State, now int64) (w, p, c int64, state core.State) {
	P := sp.Period
	w = now / P
	if st.Expire == 0 {
		return w, 0, 0, 0
	}
	switch sw := st.Expire/P - 2; {
	case sw >= w: // this window, or the clock stepped back into an older one
		return sw, st.V >> 32, st.V & 0xffffffff, st.State
	case sw == w-1 && st.V&0xffffffff > 0:
		return w, st.V & 0xffffffff, 0, st.State
	}
	return w, 0, 0, 0
}
