package limitertest

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
)

// Admission is one admitted decision: the instant it was decided at (its
// Result.At) and its cost.
type Admission struct {
	At, N int64
}

// CheckPromise reports the first way the admissions break l's promise, or
// nil. It is an exact model of what each algorithm promises, independent of
// how it keeps its state:
//   - buckets: at most Capacity + Rate×t/Period in any interval of t µs;
//   - sliding window log: at most Rate in any trailing Period (t-Period, t];
//   - fixed window and sliding window counter: at most Rate in any aligned
//     window [kP, (k+1)P).
//
// Instants are the decisions' Result.At: a decision at an instant behind the
// key's state is recorded at the instant the state records (see
// docs/algorithms.md, "Clock steps").
func CheckPromise(l core.Limit, adm []Admission) error {
	P := int64(l.Period / time.Microsecond)
	adm = slices.Clone(adm)
	slices.SortStableFunc(adm, func(a, b Admission) int { return cmpInt(a.At, b.At) })
	switch {
	case l.Algorithm.Bucket():
		for i := range adm {
			var sum int64
			for j := i; j < len(adm); j++ {
				sum += adm[j].N
				span := adm[j].At - adm[i].At
				// sum×P > Capacity×P + Rate×span, in exact integers
				lhs := new(big.Int).Mul(big.NewInt(sum), big.NewInt(P))
				rhs := new(big.Int).Mul(big.NewInt(l.Rate), big.NewInt(span))
				if lhs.Cmp(rhs.Add(rhs, new(big.Int).Mul(big.NewInt(l.Capacity()), big.NewInt(P)))) > 0 {
					return fmt.Errorf("%s: %d admitted in the %dµs from %d", l, sum, span, adm[i].At)
				}
			}
		}
	case l.Algorithm == core.SlidingWindowLog:
		for j := range adm {
			var sum int64
			for i := j; i >= 0 && adm[i].At > adm[j].At-P; i-- {
				sum += adm[i].N
			}
			for k := j + 1; k < len(adm) && adm[k].At == adm[j].At; k++ {
				sum += adm[k].N
			}
			if sum > l.Rate {
				return fmt.Errorf("%s: %d admitted in the window ending %d", l, sum, adm[j].At)
			}
		}
	default:
		per := map[int64]int64{}
		for _, a := range adm {
			w := a.At / P
			if per[w] += a.N; per[w] > l.Rate {
				return fmt.Errorf("%s: %d admitted in window %d", l, per[w], w)
			}
		}
	}
	return nil
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// mustTake is s.Take, failing t on an error.
func mustTake(ctx context.Context, t *testing.T, s core.Store, key core.Key, l core.Limit, cost int64) core.Result {
	t.Helper()
	r, err := TakeOne(ctx, s, key, l, cost)
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	return r
}

// mustRefund is s.Refund of cost units of key admitted at at, failing t
// on an error.
func mustRefund(ctx context.Context, t *testing.T, s core.Store, key core.Key, l core.Limit, cost, at int64) {
	t.Helper()
	if err := s.Refund(ctx, core.Admission{Key: key, Limit: l, Cost: cost, At: at}); err != nil {
		t.Fatalf("Refund: %v", err)
	}
}

// testRefundsExact: a refund undoes exactly the admission it names, or
// nothing.
func testRefundsExact(t *testing.T, newStore Factory) {
	t.Run("fixed-window/previous-window", func(t *testing.T) { refundPreviousWindow(t, newStore) })
	t.Run("sliding-window-log/refunded-entry", func(t *testing.T) { refundLogEntry(t, newStore) })
	t.Run("sliding-window-counter/older-window", func(t *testing.T) { refundOlderWindow(t, newStore) })
	for _, a := range []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.GCRA} {
		t.Run(a.String()+"/drained", func(t *testing.T) { refundDrained(t, newStore, a) })
	}
}

// refunded is one key of the refund cases, under l, on its own store
// and clock.
type refunded struct {
	ctx   context.Context
	t     *testing.T
	s     core.Store
	clock *Clock
	key   core.Key
	l     core.Limit
}

func newRefunded(t *testing.T, newStore Factory, l core.Limit) *refunded {
	clock := NewClock()
	return &refunded{ctx: context.Background(), t: t, s: newStore(t, clock.Now), clock: clock, key: Key(t), l: l}
}

// take takes cost units of the key.
func (k *refunded) take(cost int64) core.Result {
	k.t.Helper()
	return mustTake(k.ctx, k.t, k.s, k.key, k.l, cost)
}

// refund refunds cost units of the key admitted at at.
func (k *refunded) refund(cost, at int64) {
	k.t.Helper()
	mustRefund(k.ctx, k.t, k.s, k.key, k.l, cost, at)
}

// refundPreviousWindow: a fixed window's refund of an admission of the
// window before gives nothing; one of this window's gives its unit back.
func refundPreviousWindow(t *testing.T, newStore Factory) {
	k := newRefunded(t, newStore, core.Per(2, time.Second).WithAlgorithm(core.FixedWindow))
	k.clock.Advance(900 * time.Millisecond)
	old := k.take(1)
	k.clock.Advance(200 * time.Millisecond) // the next window
	a, b := k.take(1), k.take(1)
	if !old.Allowed || !a.Allowed || !b.Allowed {
		t.Fatalf("setup: %+v %+v %+v", old, a, b)
	}
	k.refund(1, old.At) // its window has passed: nothing
	if r := k.take(1); r.Allowed {
		t.Fatalf("a refund of the previous window's admission freed room in this one: %+v", r)
	}
	k.refund(1, a.At) // this window's: one unit back
	if r := k.take(1); !r.Allowed {
		t.Fatalf("a refund of this window's admission gave nothing: %+v", r)
	}
}

// refundLogEntry: a sliding log's refund removes the entry it names, and
// an expired entry's refund gives nothing.
func refundLogEntry(t *testing.T, newStore Factory) {
	k := newRefunded(t, newStore, core.Per(2, time.Second).WithAlgorithm(core.SlidingWindowLog))
	a := k.take(1)
	k.clock.Advance(600 * time.Millisecond)
	b := k.take(1)
	k.refund(1, a.At) // the older entry goes, not the newest
	k.clock.Advance(100 * time.Millisecond)
	c := k.take(1)
	if !a.Allowed || !b.Allowed || !c.Allowed {
		t.Fatalf("setup: %+v %+v %+v", a, b, c)
	}
	// 1.1 s after a: b (at 0.6 s) and c (at 0.7 s) fill the window until
	// b leaves it at 1.6 s.
	k.clock.Advance(400 * time.Millisecond)
	if r := k.take(1); r.Allowed {
		t.Fatalf("three admissions in one trailing second: the refund removed the wrong entry: %+v", r)
	}
	k.clock.Advance(500 * time.Millisecond)
	if r := k.take(1); !r.Allowed {
		t.Fatalf("b left the window: %+v", r)
	}
	k.refund(1, b.At) // expired entry: nothing
	if r := k.take(1); r.Allowed {
		t.Fatalf("the refund of an expired entry gave back a unit: %+v", r)
	}
}

// refundOlderWindow: a sliding counter's refund of an admission of a
// window it no longer counts gives nothing; one of this window's gives it
// back.
func refundOlderWindow(t *testing.T, newStore Factory) {
	k := newRefunded(t, newStore, core.Per(2, time.Second).WithAlgorithm(core.SlidingWindowCounter))
	old := k.take(2)
	k.clock.Advance(2500 * time.Millisecond) // two windows later: old counts no more
	a := k.take(2)
	k.refund(2, old.At)
	if r := k.take(1); !old.Allowed || !a.Allowed || r.Allowed {
		t.Fatalf("a refund of a forgotten window freed room: %+v %+v %+v", old, a, r)
	}
	k.refund(2, a.At)
	if r := k.take(0); r.Remaining != 2 {
		t.Fatalf("a refund of this window's admission: %+v", r)
	}
}

// refundDrained: a bucket's refund of an admission drained since gives
// nothing (not another's unit); an immediate one restores the bucket.
func refundDrained(t *testing.T, newStore Factory, a core.Algorithm) {
	k := newRefunded(t, newStore, core.Per(1, time.Second).WithBurst(2).WithAlgorithm(a))
	first := k.take(1)               // TAT: +1 s
	k.clock.Advance(3 * time.Second) // drained
	second := k.take(1)
	k.refund(1, first.At) // nothing of it is left
	if r := k.take(0); !first.Allowed || !second.Allowed || r.Remaining != 1 {
		t.Fatalf("the refund of a drained admission gave back another's unit: %+v", r)
	}
	k.refund(1, second.At) // all of it is left
	if r := k.take(0); r.Remaining != 2 || r.ResetAfter != 0 {
		t.Fatalf("an immediate refund did not restore the bucket: %+v", r)
	}
}

// testClockSteps: random traces of takes, refunds of earlier admissions (in
// any order) and clock steps forwards and backwards, small and large and
// across windows; no algorithm ever admits more than its promise, and every
// result is in range. A key whose state is gone (the clock reached the
// instant it is fresh again, so the store may have dropped it, or a refund
// took it back to fresh) records no instant: what it admits next is checked
// as a new key's.
func testClockSteps(t *testing.T, newStore Factory) {
	for _, a := range Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			t.Parallel()
			clock := NewClock()
			s := newStore(t, clock.Now)
			rng := rand.New(rand.NewPCG(uint64(a), 1212))
			limits := Limits(a)
			if a.Bucket() { // a large rate: the TAT clamp of large backward steps
				limits = append(limits, core.Limit{Algorithm: a, Rate: 999_999_937, Period: 1000 * time.Second, Burst: 9_000_000})
			}
			var back time.Duration // how far behind its start the clock is
			for li, l := range limits {
				tr := &clockTrace{ctx: context.Background(), t: t, s: s, clock: clock, rng: rng, key: Key(t), l: l, li: li, back: &back}
				for i := range 300 {
					tr.stepClock()
					if !tr.refundOne() {
						tr.take(i)
					}
				}
				tr.newEpoch()
			}
		})
	}
}

// clockTrace is one limit's trace of testClockSteps, on its own key: the
// admissions of the key's state since it was last fresh, which of them
// were refunded, and the instant the key is fresh again.
type clockTrace struct {
	ctx      context.Context
	t        *testing.T
	s        core.Store
	clock    *Clock
	rng      *rand.Rand
	key      core.Key
	l        core.Limit
	li       int            // the limit's index, for errors
	back     *time.Duration // how far behind its start the clock is, over every limit
	adm      []Admission
	refunded []bool
	freshAt  int64
}

// newEpoch checks the admissions not refunded against the promise and
// starts afresh: the key's state is gone.
func (tr *clockTrace) newEpoch() {
	var kept []Admission
	for j := range tr.adm {
		if !tr.refunded[j] {
			kept = append(kept, tr.adm[j])
		}
	}
	if err := CheckPromise(tr.l, kept); err != nil {
		tr.t.Fatalf("limit %d: %v", tr.li, err)
	}
	tr.adm, tr.refunded = nil, nil
}

// stepClock moves the clock by a random step, forwards or backwards,
// small or across windows, never more than 30 minutes behind its start;
// at the instant the key is fresh again its epoch ends.
func (tr *clockTrace) stepClock() {
	P := int64(tr.l.Period / time.Microsecond)
	step := max(P/tr.l.Rate*2, 2)
	var d time.Duration
	switch tr.rng.IntN(14) {
	case 0:
		d = time.Duration(tr.rng.Int64N(3*P)) * time.Microsecond
	case 1:
		d = -time.Duration(tr.rng.Int64N(step)) * time.Microsecond
	case 2:
		d = -time.Duration(tr.rng.Int64N(2*P)) * time.Microsecond // across windows
	case 3:
		d = -time.Duration(tr.rng.Int64N(int64(10 * time.Minute))).Truncate(time.Microsecond)
	case 4, 5:
	default:
		d = time.Duration(tr.rng.Int64N(step)) * time.Microsecond
	}
	if *tr.back-d > 30*time.Minute { // stores with real expiries: stay ahead of real time
		d = -d
	}
	*tr.back -= d
	tr.clock.Advance(d)
	if tr.clock.Now().UnixMicro() >= tr.freshAt {
		tr.newEpoch()
	}
}

// refundOne refunds, one time in five, a random earlier admission (once),
// and learns when the key is fresh again; false when it refunded nothing
// this step (the trace takes instead).
func (tr *clockTrace) refundOne() bool {
	if len(tr.adm) == 0 || tr.rng.IntN(5) != 0 {
		return false
	}
	j := tr.rng.IntN(len(tr.adm))
	if tr.refunded[j] {
		return true
	}
	tr.refunded[j] = true
	mustRefund(tr.ctx, tr.t, tr.s, tr.key, tr.l, tr.adm[j].N, tr.adm[j].At)
	peek, err := TakeOne(tr.ctx, tr.s, tr.key, tr.l, 0)
	if err != nil {
		tr.t.Fatalf("Take: %v", err)
	}
	if tr.freshAt = tr.clock.Now().UnixMicro() + int64(peek.ResetAfter/time.Microsecond); peek.ResetAfter == 0 {
		tr.newEpoch()
	}
	return true
}

// take takes a random cost (0, 1, up to the capacity and beyond it, or
// all of it) at step i, checks the result is in range and records an
// admission.
func (tr *clockTrace) take(i int) {
	t, l := tr.t, tr.l
	cost := int64(1)
	switch tr.rng.IntN(8) {
	case 0:
		cost = 0
	case 1:
		cost = tr.rng.Int64N(min(l.Capacity(), 20) + 2)
	case 2:
		cost = l.Capacity()
	}
	now := tr.clock.Now().UnixMicro()
	r, err := TakeOne(tr.ctx, tr.s, tr.key, l, cost)
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	if r.At < now || r.Remaining < 0 || r.Remaining > l.Capacity() || r.ResetAfter < 0 || (!r.Allowed && r.RetryAfter <= 0) {
		t.Fatalf("%s step %d at %d cost %d: out of range: %+v", l, i, now, cost, r)
	}
	if l.Algorithm.Bucket() && r.At != now {
		t.Fatalf("%s: a bucket decides at now: %+v", l, r)
	}
	tr.freshAt = now + int64(r.ResetAfter/time.Microsecond) // the key's, whatever came before
	if r.Allowed && cost > 0 {
		tr.adm, tr.refunded = append(tr.adm, Admission{At: r.At, N: cost}), append(tr.refunded, false)
	}
}

// testWaits: every wait a store tells is exact, for all six algorithms,
// on keys drained at random points of their windows by random costs, under
// random rates, periods and bursts (buckets whose backward steps pass the
// clamp of their TAT included), with the clock stepping back now and then.
// RetryAfter and ResetAfter are whole µs; a denied request of the same cost
// is denied again 1µs before now+RetryAfter and passes at exactly
// now+RetryAfter; a request of the whole capacity is denied 1µs before
// now+ResetAfter and passes at exactly now+ResetAfter. No other traffic
// reaches the key in between (a denied probe consumes nothing).
func testWaits(t *testing.T, newStore Factory) {
	ctx := context.Background()
	for _, a := range Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			t.Parallel()
			clock := NewClock()
			s := newStore(t, clock.Now)
			rng := rand.New(rand.NewPCG(uint64(a), 1214))
			probed := 0
			for range 8 {
				l := WaitLimit(rng, a)
				key := Key(t)
				P := int64(l.Period / time.Microsecond)
				step := max(P/l.Capacity(), 1)
				clock.Advance(time.Duration(rng.Int64N(P)) * time.Microsecond) // anywhere in a window
				for i := range 60 {
					d := rng.Int64N(step + 1)
					switch rng.IntN(10) {
					case 0:
						d = -rng.Int64N(min(2*P, 60_000_000) + 1) // back, across windows
					case 1:
						d = -rng.Int64N(20_000_000) // back by seconds: past a large-rate bucket's clamp
					}
					clock.Advance(time.Duration(d) * time.Microsecond)
					cost := int64(1)
					if rng.IntN(3) == 0 {
						cost = 1 + rng.Int64N(l.Capacity())
					}
					r, err := TakeOne(ctx, s, key, l, cost)
					if err != nil {
						t.Fatalf("Take: %v", err)
					}
					what := fmt.Sprintf("%s step %d: cost %d: %+v", l, i, cost, r)
					if r.RetryAfter%time.Microsecond != 0 || r.ResetAfter%time.Microsecond != 0 {
						t.Fatalf("%s: not whole µs", what)
					}
					switch {
					case !r.Allowed:
						probed++
						probeAt(ctx, t, s, clock, key, l, cost, r.RetryAfter, what+": RetryAfter")
					case rng.IntN(6) == 0 && r.ResetAfter > 0:
						probeAt(ctx, t, s, clock, key, l, l.Capacity(), r.ResetAfter, what+": ResetAfter")
					}
				}
			}
			if probed == 0 {
				t.Fatal("no denial probed")
			}
		})
	}
}

// probeAt moves clock to 1µs before wait and requires a request of cost
// to be denied there, then to exactly wait and requires it to pass.
func probeAt(ctx context.Context, t *testing.T, s core.Store, clock *Clock, key core.Key, l core.Limit, cost int64, wait time.Duration, what string) {
	t.Helper()
	clock.Advance(wait - time.Microsecond)
	early, err := TakeOne(ctx, s, key, l, cost)
	if err != nil || early.Allowed {
		t.Fatalf("%s (%s): cost %d admitted 1µs before: %+v %v", what, wait, cost, early, err)
	}
	clock.Advance(time.Microsecond)
	again, err := TakeOne(ctx, s, key, l, cost)
	if err != nil || !again.Allowed {
		t.Fatalf("%s (%s): cost %d denied at exactly that wait: %+v %v", what, wait, cost, again, err)
	}
}

// WaitLimit returns a random valid limit of algorithm a for tests of
// waits: small and large rates, periods from a µs to a minute, any burst,
// and, for the buckets, now and then a rate so large that a backward step
// of seconds passes the clamp of the TAT (about 9 s at 10^9 per 1000 s).
func WaitLimit(rng *rand.Rand, a core.Algorithm) core.Limit {
	for {
		rate := 1 + rng.Int64N(20)
		if rng.IntN(5) == 0 {
			rate = 1 + rng.Int64N(2000)
		}
		period := time.Duration(1+rng.Int64N(3_000_000)) * time.Microsecond
		if rng.IntN(5) == 0 {
			period = time.Duration(1+rng.Int64N(60)) * time.Second
		}
		l := core.Per(rate, period).WithAlgorithm(a)
		if a.Bucket() {
			l.Burst = rng.Int64N(2 * rate)
			if rng.IntN(4) == 0 {
				l = core.Limit{Algorithm: a, Rate: 999_999_937, Period: 1000 * time.Second, Burst: 1 + rng.Int64N(20)}
			}
		}
		if l.Validate() == nil {
			return l
		}
	}
}

// testClockStepCases: refunds across backward steps of the clock.
func testClockStepCases(t *testing.T, newStore Factory) {
	ctx := context.Background()
	take := func(t *testing.T, s core.Store, key core.Key, l core.Limit, cost int64) core.Result {
		return mustTake(ctx, t, s, key, l, cost)
	}
	t.Run("sliding-window-log/step-back-after-a-denial", func(t *testing.T) {
		clock := NewClock()
		s := newStore(t, clock.Now)
		l := core.Per(2, time.Second).WithAlgorithm(core.SlidingWindowLog)
		key := Key(t)
		a := take(t, s, key, l, 1)
		clock.Advance(900 * time.Millisecond)
		b := take(t, s, key, l, 1)
		clock.Advance(600 * time.Millisecond) // 1.5 s: a has left the window
		c := take(t, s, key, l, 2)            // denied: b still counts
		if !a.Allowed || !b.Allowed || c.Allowed {
			t.Fatalf("setup: %+v %+v %+v", a, b, c)
		}
		clock.Advance(-550 * time.Millisecond) // back to 0.95 s: a counts again
		if r := take(t, s, key, l, 1); r.Allowed {
			t.Fatalf("3 admitted within one second after a backward step: %+v", r)
		}
	})
	for _, a := range []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.GCRA} {
		t.Run(a.String()+"/large-rate-far-back", func(t *testing.T) {
			clock := NewClock()
			s := newStore(t, clock.Now)
			// about 10^6 per second, with units of about 10^-9 µs: the debt
			// is clamped when the clock steps back by more than about 9 s
			l := core.Limit{Algorithm: a, Rate: 999_999_937, Period: 1000 * time.Second, Burst: 9_000_000}
			key := Key(t)
			if r := take(t, s, key, l, l.Burst); !r.Allowed {
				t.Fatalf("the first burst: %+v", r)
			}
			clock.Advance(-time.Minute)
			if r := take(t, s, key, l, 1); r.Allowed {
				t.Fatalf("admitted a minute before a full burst: %+v", r)
			}
			clock.Advance(time.Minute + time.Second)
			if r := take(t, s, key, l, l.Burst); r.Allowed {
				t.Fatalf("a second full burst one second after the first: %+v", r)
			}
		})
	}
}
