package algo_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/algo"
)

// step is one call at an instant (µs) with its expected Result.
type step struct {
	at        int64
	cost      int64
	allowed   bool
	remaining int64
	retry     time.Duration // core.RetryNever for never
	reset     time.Duration
	state     core.State
}

// runner drives any algorithm, the log included, through one key.
type runner struct {
	sp algo.Spec
	st algo.State
	lg algo.Log
}

func (r *runner) take(now, cost int64) core.Result {
	var o algo.Outcome
	if r.sp.Algorithm == core.SlidingWindowLog {
		r.sp.StepLog(&r.lg, &o, now, cost)
	} else {
		r.sp.Step(&r.st, &o, now, cost)
	}
	return r.sp.Result(&o)
}

func runSteps(t *testing.T, l core.Limit, steps []step) {
	t.Helper()
	r := &runner{sp: algo.MustCompile(l)}
	for i, s := range steps {
		got := r.take(s.at, s.cost)
		want := core.Result{Allowed: s.allowed, Capacity: l.Capacity(), Remaining: s.remaining, RetryAfter: s.retry, ResetAfter: s.reset, State: s.state}
		got.Previous = 0 // transitions are checked by TestPreviousState
		require.GreaterOrEqual(t, got.At, s.at, "step %d: decided before now", i)
		got.At = 0 // the instant is checked by the clock-step tests
		require.Equal(t, want, got, "step %d: at %dµs cost %d", i, s.at, s.cost)
	}
}

const (
	us = time.Microsecond
	ms = time.Millisecond
	s1 = int64(1_000_000) // one second in µs
)

// The three bucket views must pass the same table: they are one meter.
func TestBucketSteps(t *testing.T) {
	N, W, T := core.Normal, core.Warning, core.Throttled
	// 10 per second, burst 10: one token every 100ms.
	steps := []step{
		{0, 0, true, 10, 0, 0, N},                                // peek on a fresh key
		{0, 8, true, 2, 0, 800 * ms, N},                          // 80%: not above
		{0, 1, true, 1, 0, 900 * ms, W},                          // 90% > 80%
		{0, 2, false, 1, 100 * ms, 900 * ms, T},                  // denied: one token short, exact wait
		{0, 1, true, 0, 0, time.Second, W},                       // the deny consumed nothing
		{1, 1, false, 0, 100*ms - us, 999999 * us, T},            // 1µs later: one µs of refill
		{100_000, 1, true, 0, 0, time.Second, W},                 // exact refill instant
		{100_000, 11, false, 0, core.RetryNever, time.Second, T}, // above capacity: never
		{100_000, 10, false, 0, time.Second, time.Second, T},     // cost = capacity: wait for full
		{1_100_000, 10, true, 0, 0, time.Second, W},              // full again, take all
		{50_000, 1, false, 0, 1150 * ms, 2050 * ms, T},           // clock stepped back 1.05s: debt grows, state kept
		{3_100_000, 0, true, 10, 0, 0, N},                        // long idle: fresh
	}
	for _, a := range []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.GCRA} {
		t.Run(a.String(), func(t *testing.T) { runSteps(t, core.PerSecond(10).WithAlgorithm(a), steps) })
	}
}

func TestBucketFractionalInterval(t *testing.T) {
	// 3 per second, burst 1: the interval is 333333.33µs, exact in units of 1/3µs.
	l := core.PerSecond(3).WithBurst(1).WithAlgorithm(core.GCRA)
	steps := []step{
		{0, 1, true, 0, 0, 333334 * us, core.Warning}, // burst 1: any use is 100%
		{333_333, 1, false, 0, 1 * us, 1 * us, core.Throttled},
		// 2/3µs late: the TAT moves to 666667⅓µs, carried exactly.
		{333_334, 1, true, 0, 0, 333334 * us, core.Warning},
		{666_667, 1, false, 0, 1 * us, 1 * us, core.Throttled},
		{666_668, 1, true, 0, 0, 333334 * us, core.Warning},
		{1_000_001, 1, false, 0, 1 * us, 1 * us, core.Throttled},
	}
	runSteps(t, l, steps)
	// Three thousand requests at the 1/3s instants (rounded up to the µs)
	// with burst 2: all admitted, the spare token never grows beyond one,
	// and after the run exactly the burst is left.
	r := &runner{sp: algo.MustCompile(core.PerSecond(3).WithBurst(2))}
	require.True(t, r.take(0, 1).Allowed)
	var at int64
	for i := int64(1); i < 3000; i++ {
		at = (i*s1 + 2) / 3
		res := r.take(at, 1)
		require.True(t, res.Allowed, "request %d at %dµs", i, at)
		require.LessOrEqual(t, res.Remaining, int64(1), "request %d at %dµs", i, at)
	}
	at += s1
	require.True(t, r.take(at, 2).Allowed)
	require.False(t, r.take(at, 1).Allowed)
}

func TestFixedWindowSteps(t *testing.T) {
	N, W, T := core.Normal, core.Warning, core.Throttled
	l := core.PerSecond(5).WithAlgorithm(core.FixedWindow)
	runSteps(t, l, []step{
		{2_000_000, 0, true, 5, 0, 0, N},
		{2_100_000, 4, true, 1, 0, 900 * ms, N},           // 80%
		{2_200_000, 1, true, 0, 0, 800 * ms, W},           // 100%
		{2_999_999, 1, false, 0, us, us, T},               // last µs of the window
		{3_000_000, 5, true, 0, 0, time.Second, W},        // window edge: a fresh count
		{2_500_000, 1, false, 0, 1500 * ms, 1500 * ms, T}, // clock back: the newer window holds until its end
		{3_000_000, 6, false, 0, core.RetryNever, time.Second, T},
		{5_000_000, 1, true, 4, 0, time.Second, N}, // a window later: fresh
	})
}

func TestSlidingWindowCounterSteps(t *testing.T) {
	N, W, T := core.Normal, core.Warning, core.Throttled
	// Cloudflare's example scaled: 50 per minute, 42 in the previous window,
	// 18 in this one, 15s in: 42×45/60 + 18 = 49.5.
	l := core.PerMinute(50).WithAlgorithm(core.SlidingWindowCounter)
	const m = 60 * s1
	runSteps(t, l, []step{
		{10 * m, 42, true, 8, 0, 120 * time.Second, W},
		// 42×46/60 + 18 = 50.2 > 50: denied until 42×(60-e)/60 <= 32.
		{11*m + 14*s1, 18, false, 17, 285715 * us, 46 * time.Second, T},
		{11*m + 15*s1, 18, true, 0, 0, 105 * time.Second, W}, // 49.5
		{11*m + 15*s1, 1, false, 0, 714286 * us, 105 * time.Second, T},
		{11*m + 16*s1, 1, true, 0, 0, 104 * time.Second, W}, // 49.8
		{12*m + 30*s1, 0, true, 40, 0, 30 * time.Second, N}, // peek: 19×0.5 = 9.5 used
		{12*m + 30*s1, 1, true, 39, 0, 90 * time.Second, N},
		// The clock steps back 10s before the newer window: decided at its start.
		{11*m + 50*s1, 0, true, 30, 0, 130 * time.Second, N},
	})
	// Denied in a full window: the wait crosses into the next one.
	runSteps(t, core.Per(10, time.Second).WithAlgorithm(core.SlidingWindowCounter), []step{
		{0, 10, true, 0, 0, 2 * time.Second, W},
		{500_000, 1, false, 0, 600 * ms, 1500 * ms, T}, // next window: 10×(1−e)+1 <= 10 at e=0.1
		{1_100_000, 1, true, 0, 0, 1900 * ms, W},
		{1_100_000, 10, false, 0, 1900 * ms, 1900 * ms, T}, // only once this window's 1 has decayed away
		{1_100_000, 11, false, 0, core.RetryNever, 1900 * ms, T},
	})
}

func TestSlidingWindowLogSteps(t *testing.T) {
	N, W, T := core.Normal, core.Warning, core.Throttled
	l := core.PerSecond(4).WithAlgorithm(core.SlidingWindowLog)
	runSteps(t, l, []step{
		{0, 1, true, 3, 0, time.Second, N},
		{250_000, 2, true, 1, 0, time.Second, N},
		{500_000, 1, true, 0, 0, time.Second, W},
		{600_000, 2, false, 0, 650 * ms, 900 * ms, T}, // needs the 0 and 250ms entries to leave
		{1_000_000, 1, true, 0, 0, time.Second, W},    // the entry at 0 leaves exactly at 1s
		{1_000_000, 5, false, 0, core.RetryNever, time.Second, T},
		{900_000, 1, false, 0, 350 * ms, 1100 * ms, T}, // clock back: decided at the newest instant
		{2_000_001, 0, true, 4, 0, 0, N},
	})
}

func TestPeriods(t *testing.T) {
	for _, a := range []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.GCRA, core.FixedWindow, core.SlidingWindowCounter, core.SlidingWindowLog} {
		t.Run(a.String()+"/sub-millisecond", func(t *testing.T) {
			// 2 per 250µs.
			r := &runner{sp: algo.MustCompile(core.Per(2, 250*us).WithAlgorithm(a))}
			require.True(t, r.take(1_000_000, 2).Allowed)
			res := r.take(1_000_000, 1)
			require.False(t, res.Allowed)
			require.LessOrEqual(t, res.RetryAfter, 500*us) // the counter may wait into the next window
			require.True(t, r.take(1_000_000+int64(res.RetryAfter/us), 1).Allowed, "allowed at RetryAfter %s", res.RetryAfter)
		})
		t.Run(a.String()+"/one-year", func(t *testing.T) {
			year := 365 * 24 * time.Hour
			rate := int64(100)
			r := &runner{sp: algo.MustCompile(core.Per(rate, year).WithAlgorithm(a))}
			now := int64(1_700_000_000) * s1
			require.True(t, r.take(now, rate).Allowed)
			res := r.take(now+1, 1)
			require.False(t, res.Allowed)
			require.Greater(t, res.RetryAfter, time.Duration(0))
			require.LessOrEqual(t, res.RetryAfter, 2*year)
			require.True(t, r.take(now+1+int64((res.RetryAfter+us-1)/us), 1).Allowed)
		})
	}
}

func TestRetryAfterIsExact(t *testing.T) {
	// For every algorithm a denied request succeeds exactly at RetryAfter and
	// not one µs before.
	for _, l := range []core.Limit{
		core.Per(7, 3*time.Second), core.Per(7, 3*time.Second).WithBurst(3).WithAlgorithm(core.GCRA),
		core.Per(7, 3*time.Second).WithAlgorithm(core.FixedWindow), core.Per(7, 3*time.Second).WithAlgorithm(core.SlidingWindowLog),
		core.Per(7, 3*time.Second).WithAlgorithm(core.SlidingWindowCounter),
	} {
		t.Run(l.String(), func(t *testing.T) {
			r := &runner{sp: algo.MustCompile(l)}
			now := int64(1_000_000_007)
			for i := 0; i < 200; i++ {
				cost := int64(i%3 + 1)
				res := r.take(now, cost)
				if !res.Allowed {
					wait := int64((res.RetryAfter + us - 1) / us)
					probe := *r
					probe.lg = algo.Log{At: append([]int64(nil), r.lg.At...), N: append([]int64(nil), r.lg.N...)}
					require.False(t, probe.take(now+wait-1, 0).Allowed && cost == 1, "allowed 1µs before RetryAfter")
					res = r.take(now+wait, cost)
					require.True(t, res.Allowed, "denied at RetryAfter (%s), step %d", fmt.Sprint(wait), i)
					now += wait
				}
				now += int64(i * 7919 % 400_000)
			}
		})
	}
}

func TestPreviousState(t *testing.T) {
	for _, a := range []core.Algorithm{core.TokenBucket, core.FixedWindow, core.SlidingWindowCounter, core.SlidingWindowLog} {
		r := &runner{sp: algo.MustCompile(core.PerMinute(5).WithAlgorithm(a))}
		var trans [][2]core.State
		for range 7 {
			res := r.take(60_000_000, 1)
			trans = append(trans, [2]core.State{res.Previous, res.State})
		}
		N, W, T := core.Normal, core.Warning, core.Throttled
		require.Equal(t, [][2]core.State{{N, N}, {N, N}, {N, N}, {N, N}, {N, W}, {W, T}, {T, T}}, trans, a.String())
		res := r.take(60_000_000, 0) // a peek reports without changing
		require.Equal(t, [2]core.State{T, T}, [2]core.State{res.Previous, res.State})
		res = r.take(10*60_000_000, 1) // long idle: the key was fresh, so Normal before
		require.Equal(t, [2]core.State{N, N}, [2]core.State{res.Previous, res.State}, a.String())
	}
}
