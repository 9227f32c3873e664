package algo_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/algo"
)

// bookStep is one call at an instant (µs): a Book with maxDelay (µs), a
// Step (maxDelay -1) or a Refund of an earlier admission (refundAt >= 0,
// then checked by a peek), with the expected Result and its At.
type bookStep struct {
	now, cost, maxDelay int64
	allowed             bool
	remaining           int64
	retry, reset        time.Duration
	state               core.State
	at                  int64 // the recorded instant (the slot)
	refundAt            int64
}

func runBook(t *testing.T, l core.Limit, steps []bookStep) {
	t.Helper()
	sp := algo.MustCompile(l)
	var st algo.State
	for i, s := range steps {
		var o algo.Outcome
		switch {
		case s.refundAt >= 0:
			sp.Refund(&st, s.now, s.cost, s.refundAt)
			sp.Step(&st, &o, s.now, 0)
		case s.maxDelay < 0:
			sp.Step(&st, &o, s.now, s.cost)
		default:
			sp.Book(&st, &o, s.now, s.cost, s.maxDelay)
		}
		got := sp.Result(&o)
		want := core.Result{Allowed: s.allowed, Capacity: l.Capacity(), Remaining: s.remaining, RetryAfter: s.retry, ResetAfter: s.reset, State: s.state, At: s.at}
		got.Previous = 0
		require.Equal(t, want, got, "step %d: now %dµs cost %d maxDelay %d", i, s.now, s.cost, s.maxDelay)
	}
}

// A booking is the take at its slot: the three bucket views book alike.
func TestBookSteps(t *testing.T) {
	N, W, T := core.Normal, core.Warning, core.Throttled
	const no = -1 // not a refund
	// 10 per second, burst 10: one unit every 100ms.
	steps := []bookStep{
		{0, 10, 0, true, 0, 0, time.Second, W, 0, no},                                     // a booking with no delay allowed: a take
		{0, 1, -1, false, 0, 100 * ms, time.Second, T, 0, no},                             // a take waits 100ms
		{0, 1, 50_000, false, 0, 100 * ms, time.Second, T, 0, no},                         // the slot is beyond the bound: a denied take
		{0, 1, 100_000, true, 0, 100 * ms, 1100 * ms, W, 100_000, no},                     // booked at the bound's edge: slot at 100ms
		{0, 2, s1, true, 0, 300 * ms, 1300 * ms, W, 300_000, no},                          // booked behind it, in booking order
		{0, 0, s1, true, 0, 400 * ms, 1300 * ms, W, 400_000, no},                          // a peek: the next slot, nothing booked
		{50_000, 1, -1, false, 0, 350 * ms, 1250 * ms, T, 50_000, no},                     // a take waits behind every booking
		{50_000, 2, 0, false, 0, 150 * ms, 1050 * ms, T, 50_000, 300_000},                 // cancel the last booking (then peek): given back whole
		{50_000, 1, 0, false, 0, 50 * ms, 950 * ms, T, 50_000, 100_000},                   // and the first: the bucket is as before them
		{100_000, 1, -1, true, 0, 0, time.Second, W, 100_000, no},                         // so a take at 100ms passes
		{100_000, 10, 1_000_000, true, 0, time.Second, 2 * time.Second, W, 1_100_000, no}, // a whole burst booked a second ahead
		{2_100_000, 0, -1, true, 10, 0, 0, N, 2_100_000, no},                              // drained: fresh
	}
	for _, a := range []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.GCRA} {
		t.Run(a.String(), func(t *testing.T) { runBook(t, core.PerSecond(10).WithAlgorithm(a), steps) })
	}
}

// A cancel gives back what nothing booked behind it has used: a booking
// followed by another gives back only the part the later one does not
// rest on (x/time/rate's Reservation.Cancel gives back the same).
func TestBookCancelBehindAnother(t *testing.T) {
	W := core.Warning
	const no = -1
	runBook(t, core.PerSecond(10), []bookStep{
		{0, 10, 0, true, 0, 0, time.Second, W, 0, no},
		{0, 2, s1, true, 0, 200 * ms, 1200 * ms, W, 200_000, no},             // A: two units, slot 200ms
		{0, 1, s1, true, 0, 300 * ms, 1300 * ms, W, 300_000, no},             // B behind A: slot 300ms
		{0, 2, 0, false, 0, 300 * ms, 1200 * ms, core.Throttled, 0, 200_000}, // cancel A (then peek): B rests on 100ms of it
		{0, 1, s1, true, 0, 300 * ms, 1300 * ms, W, 300_000, no},             // the next slot is B's old one plus one
		{0, 1, 0, false, 0, 300 * ms, 1200 * ms, core.Throttled, 0, 300_000}, // cancel the last one: whole
		{250_000, 1, -1, false, 0, 50 * ms, 950 * ms, core.Throttled, 250_000, no},
		{300_000, 1, -1, true, 0, 0, time.Second, W, 300_000, no}, // B's slot: the take at it passes
	})
}

// Slots of a fractional interval are whole µs, rounded up, and the TAT
// moves as a request arriving at the slot would move it.
func TestBookFractionalInterval(t *testing.T) {
	W := core.Warning
	const no = -1
	// 3 per second, burst 1: T = 333333⅓µs.
	runBook(t, core.PerSecond(3).WithBurst(1), []bookStep{
		{0, 1, 0, true, 0, 0, 333334 * us, W, 0, no},
		{0, 1, s1, true, 0, 333334 * us, 666668 * us, W, 333_334, no},  // arrives at 333334: TAT 666667⅓
		{0, 1, s1, true, 0, 666668 * us, 1000002 * us, W, 666_668, no}, // TAT 1000001⅓
		{666_668, 1, -1, false, 0, 333334 * us, 333334 * us, core.Throttled, 666_668, no},
		{1_000_002, 1, -1, true, 0, 0, 333334 * us, W, 1_000_002, no},
	})
}

// The bound: Book clamps maxDelay to [0, MaxDelay()]; the windows do not
// book (Book is Step for them, and MaxDelay is 0).
func TestBookBound(t *testing.T) {
	sp := algo.MustCompile(core.PerSecond(10))
	require.Equal(t, (int64(1)<<53-1_000_000)-1, sp.MaxDelay())
	var st algo.State
	var o algo.Outcome
	sp.Book(&st, &o, 0, 10, 0)
	sp.Book(&st, &o, 0, 1, -5) // a negative bound books nothing
	require.False(t, o.Allowed)
	require.Equal(t, int64(100_000), o.Retry)
	sp.Book(&st, &o, 0, 1, 1<<62) // clamped: still bookable
	require.True(t, o.Allowed)
	require.Equal(t, int64(100_000), o.At)
	// The farthest booking stays exact: its debt is an exact float64.
	far := algo.MustCompile(core.Per(999_999_937, 1000*time.Second).WithBurst(9_000_000))
	st = algo.State{}
	far.Book(&st, &o, 0, 9_000_000, 0)
	require.True(t, o.Allowed)
	for range 3 {
		far.Book(&st, &o, 0, 9_000_000, far.MaxDelay())
		if !o.Allowed {
			break
		}
		require.LessOrEqual(t, o.Reset, int64(1)<<53)
	}
	for _, a := range []core.Algorithm{core.FixedWindow, core.SlidingWindowCounter} {
		w := algo.MustCompile(core.PerSecond(2).WithAlgorithm(a))
		require.Zero(t, w.MaxDelay())
		var ws, ss algo.State
		var wo, so algo.Outcome
		for i := range 4 {
			w.Book(&ws, &wo, int64(i), 1, s1)
			w.Step(&ss, &so, int64(i), 1)
			require.Equal(t, so, wo, "%s: Book is Step", a)
			require.Equal(t, ss, ws)
		}
	}
}
