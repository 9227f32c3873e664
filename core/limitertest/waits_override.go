package limitertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
)

// overridden is one key of testWaitsOverrides and what the test set on
// it: its own limit, and the override in force until until (µs; 0: none),
// whose limit is lim (the zero Limit: a block).
type overridden struct {
	ctx   context.Context
	t     *testing.T
	s     core.Store
	clock *Clock
	key   core.Key
	side  core.Key // a second op's key, for the decisions made as a group
	own   core.Limit
	lim   core.Limit
	until int64
}

// capacityAt is the capacity of the limit in force at the instant at
// (µs): the override's before it ends, the key's own after (under a block
// every cost is denied: the own capacity then).
func (k *overridden) capacityAt(at int64) int64 {
	if at < k.until && k.lim != (core.Limit{}) {
		return k.lim.Capacity()
	}
	return k.own.Capacity()
}

// take decides cost of the key now: one op, a booking within maxDelay, or,
// when group is set, a Take of two ops whose second (a peek of another
// key) never denies.
func (k *overridden) take(cost int64, maxDelay time.Duration, group bool) core.Result {
	k.t.Helper()
	var out [2]core.Result
	ops := []core.Op{{Key: k.key, Limit: k.own, Cost: cost, MaxDelay: maxDelay}}
	if group {
		ops = append(ops, core.Op{Key: k.side, Limit: k.own})
	}
	if err := k.s.Take(k.ctx, ops, out[:len(ops)]); err != nil {
		k.t.Fatalf("Take: %v", err)
	}
	return out[0]
}

// probe moves the clock to 1µs before wait and requires a take of the cost
// costAt gives for that instant to be denied, then to exactly wait and
// requires the cost for that instant to pass.
func (k *overridden) probe(wait time.Duration, costAt func(at int64) int64, what string) {
	k.t.Helper()
	for i, d := range []time.Duration{wait - time.Microsecond, time.Microsecond} {
		k.clock.Advance(d)
		cost := costAt(k.clock.Now().UnixMicro())
		r, err := TakeOne(k.ctx, k.s, k.key, k.own, cost)
		switch {
		case err != nil:
			k.t.Fatalf("%s: Take: %v", what, err)
		case i == 0 && r.Allowed:
			k.t.Fatalf("%s (%s): cost %d admitted 1µs before: %+v", what, wait, cost, r)
		case i == 1 && !r.Allowed:
			k.t.Fatalf("%s (%s): cost %d denied at exactly that wait: %+v", what, wait, cost, r)
		}
	}
}

// setOverride sets a random override or block on the key, of a random
// length: from 1µs to a few periods of either limit.
func (k *overridden) setOverride(rng *rand.Rand) {
	k.t.Helper()
	o := core.Override{}
	if rng.IntN(2) == 0 {
		o.Limit = WaitLimit(rng, Algorithms[rng.IntN(len(Algorithms))])
	}
	P := int64(k.own.Period / time.Microsecond)
	if o.Limit != (core.Limit{}) && rng.IntN(2) == 0 {
		P = int64(o.Limit.Period / time.Microsecond)
	}
	var n int64
	switch rng.IntN(4) {
	case 0:
		n = 1 + rng.Int64N(min(P, 1000)) // very short: ends before most waits
	case 1:
		n = 1 + rng.Int64N(P)
	case 2:
		n = 1 + rng.Int64N(3*P)
	default:
		n = 1 + rng.Int64N(2_000_000)
	}
	o.Until = k.clock.Now().Add(time.Duration(n) * time.Microsecond)
	if err := k.s.SetOverride(k.ctx, k.key, o); err != nil {
		k.t.Fatalf("SetOverride %+v: %v", o, err)
	}
	k.lim, k.until = o.Limit, o.Until.UnixMicro()
}

// testWaitsOverrides: the waits of testWaits hold under overrides and
// blocks (core.Store.SetOverride), which count on their own until they
// end, the key's own state deciding from then on (docs/algorithms.md,
// "Waits"). Keys of all six algorithms, drained or fresh, get overrides
// of any algorithm and blocks of random lengths at random points, the
// clock stepping both ways; decisions are takes, bookings and groups.
// Every denial is denied again 1µs before now+RetryAfter and passes at
// exactly now+RetryAfter (a cost that fits the own limit is never told
// RetryNever: the override ends, and the own limit admits it some time
// after); ResetAfter is the instant the state in force is fresh (a
// request of the capacity of the limit in force then passes, 1µs before
// the one in force then is refused).
func testWaitsOverrides(t *testing.T, newStore Factory) {
	for _, a := range Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			t.Parallel()
			clock := NewClock()
			s := newStore(t, clock.Now)
			rng := rand.New(rand.NewPCG(uint64(a), 2207))
			probed, later := 0, 0
			for round := range 10 {
				k := &overridden{ctx: context.Background(), t: t, s: s, clock: clock, key: Key(t), own: WaitLimit(rng, a)}
				k.side = core.Key{Identity: k.key.Identity, Policy: "side"}
				if rng.IntN(2) == 0 {
					k.side = Key(t) // another identity: another slot on a Cluster
				}
				p, l := k.waitsRound(rng, round)
				probed, later = probed+p, later+l
			}
			t.Logf("%d denials probed, %d of them passing only once the override ended", probed, later)
			if probed == 0 || later == 0 {
				t.Fatalf("%d denials probed, %d of them passing only once the override ended", probed, later)
			}
		})
	}
}

// waitsRound runs one round of testWaitsOverrides on k: it returns the
// denials probed, and how many of them passed only after the override or
// block they were decided under had ended.
func (k *overridden) waitsRound(rng *rand.Rand, round int) (probed, later int) {
	t, l := k.t, k.own
	P := int64(l.Period / time.Microsecond)
	k.clock.Advance(time.Duration(rng.Int64N(P)) * time.Microsecond)
	if round%3 != 0 { // drained
		k.take(l.Capacity(), 0, false)
		for range 3 {
			k.take(1, 0, false)
		}
	}
	for i := range 40 {
		d := rng.Int64N(max(P/l.Capacity(), 1) + 1)
		switch rng.IntN(12) {
		case 0:
			d = -rng.Int64N(min(2*P, 60_000_000) + 1)
		case 1:
			d = rng.Int64N(2 * P)
		}
		k.clock.Advance(time.Duration(d) * time.Microsecond)
		now := k.clock.Now().UnixMicro()
		k.changeOverride(rng)
		cost := k.randomCost(rng, now)
		var maxDelay time.Duration
		group := rng.IntN(4) == 0
		if !group && rng.IntN(4) == 0 {
			maxDelay = time.Duration(rng.Int64N(3*P)) * time.Microsecond
		}
		r := k.take(cost, maxDelay, group)
		what := fmt.Sprintf("%s step %d at %d: cost %d (within %s, group %v) under %+v until %d: %+v", l, i, now, cost, maxDelay, group, k.lim, k.until, r)
		under := now < k.until
		if r.RetryAfter != core.RetryNever && r.RetryAfter%time.Microsecond != 0 || r.ResetAfter%time.Microsecond != 0 {
			t.Fatalf("%s: not whole µs", what)
		}
		if r.Never() && max(cost, 1) <= l.Capacity() {
			t.Fatalf("%s: told never, although the own limit admits the cost once the override ends", what)
		}
		if r.Allowed && r.RetryAfter > 0 && under && r.At >= k.until {
			t.Fatalf("%s: booked at or after the override's end", what)
		}
		switch {
		case !r.Allowed && !r.Never() && rng.IntN(3) != 0:
			probed++
			if under && now+int64(r.RetryAfter/time.Microsecond) >= k.until {
				later++
			}
			c := max(cost, 1)
			k.probe(r.RetryAfter, func(int64) int64 { return c }, what+": RetryAfter")
		case r.ResetAfter > 0 && (!r.Allowed || rng.IntN(6) == 0):
			k.probe(r.ResetAfter, k.capacityAt, what+": ResetAfter")
		}
	}
	return probed, later
}

// changeOverride sets a random override or block on k (one time in
// five), or clears k's (one time in ten).
func (k *overridden) changeOverride(rng *rand.Rand) {
	switch rng.IntN(10) {
	case 0, 1:
		k.setOverride(rng)
	case 2:
		if err := k.s.ClearOverride(k.ctx, k.key); err != nil {
			k.t.Fatalf("ClearOverride: %v", err)
		}
		k.until = 0
	}
}

// randomCost is the cost of a take at now: mostly 1, else up to the
// larger of the own and the applied capacity, one more than the own
// capacity, or 0.
func (k *overridden) randomCost(rng *rand.Rand, now int64) int64 {
	l := k.own
	cost := int64(1)
	switch rng.IntN(8) {
	case 0, 1:
		cost = 1 + rng.Int64N(max(l.Capacity(), k.capacityAt(now)))
	case 2:
		cost = l.Capacity() + 1 // never under the own limit alone
	case 3:
		cost = 0
	}
	return cost
}
