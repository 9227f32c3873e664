package core_test

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/schedlag"
)

// testReserve books, refuses and cancels slots of one 10/s bucket of
// burst 2 on a store whose clock stands still, so every wait is exact.
func testReserve(t *testing.T, newStore func(t *testing.T, clock func() time.Time) core.Store) {
	ctx := context.Background()
	for _, a := range []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.GCRA} {
		t.Run(a.String(), func(t *testing.T) {
			clock := limitertest.NewClock()
			l, err := core.NewLimiter(newStore(t, clock.Now), []core.Policy{
				{Name: "q", Key: ipKey(t), Limit: core.PerSecond(10).WithBurst(2).WithAlgorithm(a)},
			})
			require.NoError(t, err)
			now := clock.Now().UnixMicro()
			book := func(n int64, maxDelay time.Duration) *core.Reservation {
				t.Helper()
				r, err := l.ReserveN(ctx, "q", "hook", n, maxDelay)
				require.NoError(t, err)
				return r
			}
			// The burst is booked now; then one slot every 100ms, in order.
			for range 2 {
				r := book(1, time.Second)
				require.True(t, r.OK())
				require.Zero(t, r.Delay())
				require.Equal(t, now, r.Result().At)
			}
			var rs []*core.Reservation
			for i := range 3 {
				r := book(1, time.Second)
				require.True(t, r.OK())
				wait := time.Duration(i+1) * 100 * time.Millisecond
				require.Equal(t, wait, r.Result().RetryAfter, "slot %d", i)
				require.Equal(t, now+int64(wait/time.Microsecond), r.Result().At)
				require.InDelta(t, float64(wait), float64(r.Delay()), float64(50*time.Millisecond))
				require.EqualValues(t, 0, r.Result().Remaining)
				rs = append(rs, r)
			}
			// Beyond the bound: not booked, nothing counted.
			r := book(1, 350*time.Millisecond)
			require.False(t, r.OK())
			require.Equal(t, core.RetryNever, r.Delay())
			require.Equal(t, 400*time.Millisecond, r.Result().RetryAfter)
			require.NoError(t, r.Cancel(ctx), "cancelling nothing does nothing")
			// A take waits behind every booking.
			pr, err := l.Allow(ctx, "q", "hook")
			require.NoError(t, err)
			require.False(t, pr.Allowed)
			require.Equal(t, 400*time.Millisecond, pr.RetryAfter)
			// Cancel the last: its slot is free again, once only.
			require.NoError(t, rs[2].Cancel(ctx))
			require.NoError(t, rs[2].Cancel(ctx))
			r = book(1, 350*time.Millisecond)
			require.True(t, r.OK(), "the cancelled slot was not given back")
			require.Equal(t, 300*time.Millisecond, r.Result().RetryAfter)
			// More than the capacity never passes.
			r = book(3, time.Hour)
			require.False(t, r.OK())
			require.True(t, r.Result().Never())
			// When the clock reaches the slots, they are spent: the next
			// slot follows the last booked one.
			clock.Advance(300 * time.Millisecond)
			r = book(1, time.Second)
			require.True(t, r.OK())
			require.Equal(t, 100*time.Millisecond, r.Result().RetryAfter)
			// A Wait whose context ends while it sleeps gives its slot back.
			r = book(1, time.Second)
			slot := r.Result().At
			require.NoError(t, r.Cancel(ctx))
			cctx, ccancel := context.WithCancel(ctx)
			time.AfterFunc(20*time.Millisecond, ccancel)
			start := time.Now()
			_, err = l.Wait(cctx, "q", "hook")
			require.ErrorIs(t, err, context.Canceled)
			require.Less(t, time.Since(start), 150*time.Millisecond, "the Wait slept past its cancel")
			r = book(1, time.Second)
			require.Equal(t, slot, r.Result().At, "the cancelled Wait kept its slot")
		})
	}
}

func TestReserveMemory(t *testing.T) {
	testReserve(t, func(t *testing.T, clock func() time.Time) core.Store {
		return memStore(t, memorystore.WithClock(clock))
	})
}

func TestReserveRedis(t *testing.T) {
	c := redistest.StartServer(t).Client(t)
	testReserve(t, func(t *testing.T, clock func() time.Time) core.Store {
		require.NoError(t, c.FlushAll(context.Background()).Err())
		s, err := redisstore.New(c, redisstore.WithClock(clock), redisstore.WithTimeout(5*time.Second))
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestReserveErrors(t *testing.T) {
	ctx := context.Background()
	l, err := core.NewLimiter(memStore(t), []core.Policy{
		{Name: "b", Key: ipKey(t), Limit: core.PerSecond(1)},
		{Name: "w", Key: ipKey(t), Limit: core.PerSecond(1).WithAlgorithm(core.SlidingWindowCounter)},
	})
	require.NoError(t, err)
	_, err = l.Reserve(ctx, "w", "a", time.Second)
	require.ErrorIs(t, err, core.ErrCannotReserve)
	require.ErrorContains(t, err, `policy "w"`)
	_, err = l.Reserve(ctx, "b", "a", -time.Second)
	require.ErrorContains(t, err, "maxDelay")
	_, err = l.Reserve(ctx, "nope", "a", time.Second)
	require.ErrorContains(t, err, `no policy "nope"`)
	_, err = l.Reserve(ctx, "b", "", time.Second)
	require.ErrorIs(t, err, core.ErrNoKey)
	_, err = l.ReserveN(ctx, "b", "a", -1, time.Second)
	require.ErrorIs(t, err, core.ErrInvalidCost)
}

// Goroutines in two Limiter instances reserve one 10/s bucket of burst 1 at
// once, sharing one memory store, one Redis, or one Redis Cluster (each
// instance with its own store and connection): every booking gets the next
// slot, exactly one interval after the one before (a queue, with no slot
// given twice and none skipped). Then Waits on the same
// key are each served at their slot, never before it on the store's own
// clock (so in booking order: when each goroutine then runs is the
// scheduler's business, not asserted), and together in the ideal time.
func TestReserveQueueAcrossInstances(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		s := memStore(t)
		testReserveQueue(t, func() core.Store { return s }, func() int64 { return time.Now().UnixMicro() })
	})
	srv := redistest.StartServer(t)
	t.Run("redis", func(t *testing.T) {
		c := srv.Client(t)
		testReserveQueue(t, func() core.Store { return redisStore(t, srv.Client(t)) }, redisNow(t, c))
	})
	t.Run("cluster", func(t *testing.T) {
		cl := shared.Cluster(t)
		c := cl.Client(t)
		testReserveQueue(t, func() core.Store { return redisStore(t, cl.Client(t)) }, redisNow(t, c))
	})
}

// redisNow reads the Redis clock, in µs: the clock its store decides on.
func redisNow(t *testing.T, c redis.UniversalClient) func() int64 {
	return func() int64 {
		now, err := c.Time(context.Background()).Result()
		if err != nil {
			t.Error(err)
		}
		return now.UnixMicro()
	}
}

func testReserveQueue(t *testing.T, newStore func() core.Store, storeNow func() int64) {
	const total = 24
	lim := core.PerSecond(10).WithBurst(1).WithAlgorithm(core.LeakyBucket)
	var ls [2]*core.Limiter
	for i := range ls {
		var err error
		ls[i], err = core.NewLimiter(newStore(), []core.Policy{{Name: "out", Key: ipKey(t), Limit: lim}})
		require.NoError(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	identity := "hooks-" + time.Now().Format("150405.000000")
	var (
		mu  sync.Mutex
		ats []int64
		wg  sync.WaitGroup
	)
	for g := range total {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := ls[g%2].Reserve(ctx, "out", identity, time.Hour)
			if !assertNoError(t, err) || !r.OK() {
				t.Error("not booked")
				return
			}
			mu.Lock()
			ats = append(ats, r.Result().At)
			mu.Unlock()
		}()
	}
	wg.Wait()
	require.Len(t, ats, total)
	sort.Slice(ats, func(i, j int) bool { return ats[i] < ats[j] })
	for i := 1; i < total; i++ {
		require.Equal(t, int64(100_000), ats[i]-ats[i-1], "slots %d and %d: not one interval apart", i-1, i)
	}
	require.NoError(t, ls[0].Reset(ctx, "out", identity))

	type served struct {
		at, now int64 // the slot, and the store's clock when the Wait returned
	}
	var out []served
	lag := schedlag.Start(t)
	start := time.Now()
	for g := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := ls[g%2].Wait(ctx, "out", identity)
			if !assertNoError(t, err) {
				return
			}
			now := storeNow()
			mu.Lock()
			out = append(out, served{r.At, now})
			mu.Unlock()
		}()
	}
	wg.Wait()
	require.Len(t, out, 12)
	sort.Slice(out, func(i, j int) bool { return out[i].at < out[j].at })
	for i := range out {
		require.GreaterOrEqual(t, out[i].now, out[i].at, "waiter %d returned before its slot on the store's clock", i)
		if i > 0 {
			require.Equal(t, int64(100_000), out[i].at-out[i-1].at, "a queue of Waits: one slot per interval, none skipped")
		}
	}
	elapsed := time.Since(start)
	require.GreaterOrEqual(t, elapsed, 1050*time.Millisecond, "11 intervals of 100ms")
	require.Less(t, elapsed, 2*time.Second+lag.Max(), "scheduling delay seen %s", lag.Max())
	t.Logf("12 Waits through 2 instances in %s (ideal 1.1s)", elapsed)
}

// Under an override the booking is made on the override's state and a
// Cancel gives it back there; an override whose limit is a window admits
// now or not at all (a take), and a block books nothing.
func TestReserveUnderOverrides(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		testReserveOverrides(t, func(t *testing.T, clock func() time.Time) core.Store {
			return memStore(t, memorystore.WithClock(clock))
		})
	})
	t.Run("redis", func(t *testing.T) {
		c := redistest.StartServer(t).Client(t)
		testReserveOverrides(t, func(t *testing.T, clock func() time.Time) core.Store {
			s, err := redisstore.New(c, redisstore.WithClock(clock), redisstore.WithTimeout(5*time.Second))
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
}

func testReserveOverrides(t *testing.T, newStore func(t *testing.T, clock func() time.Time) core.Store) {
	ctx := context.Background()
	clock := limitertest.NewClock()
	l, err := core.NewLimiter(newStore(t, clock.Now), []core.Policy{
		{Name: "q", Key: ipKey(t), Limit: core.PerSecond(10).WithBurst(1)},
	})
	require.NoError(t, err)
	until := clock.Now().Add(time.Hour)
	raised := core.PerSecond(20).WithBurst(1)
	require.NoError(t, l.SetOverride(ctx, "q", "a", raised, until))
	r1, err := l.Reserve(ctx, "q", "a", time.Second)
	require.NoError(t, err)
	require.True(t, r1.OK())
	require.Equal(t, raised, r1.Result().Limit)
	r2, err := l.Reserve(ctx, "q", "a", time.Second)
	require.NoError(t, err)
	require.Equal(t, 50*time.Millisecond, r2.Result().RetryAfter, "booked under the override's 20/s")
	require.NoError(t, r2.Cancel(ctx))
	r3, err := l.Reserve(ctx, "q", "a", time.Second)
	require.NoError(t, err)
	require.Equal(t, 50*time.Millisecond, r3.Result().RetryAfter, "the cancel gave the slot back to the override's state")

	window := core.PerSecond(1).WithAlgorithm(core.FixedWindow)
	require.NoError(t, l.SetOverride(ctx, "q", "b", window, until))
	r, err := l.Reserve(ctx, "q", "b", time.Hour)
	require.NoError(t, err)
	require.True(t, r.OK())
	require.Zero(t, r.Result().RetryAfter)
	r, err = l.Reserve(ctx, "q", "b", time.Hour)
	require.NoError(t, err)
	require.False(t, r.OK(), "a window override booked ahead")

	require.NoError(t, l.Block(ctx, "q", "c", until))
	r, err = l.Reserve(ctx, "q", "c", time.Hour)
	require.NoError(t, err)
	require.False(t, r.OK(), "a blocked identity booked")
}

// A shadow policy is on trial: Reserve never books ahead on it nor makes the
// caller wait, as WaitN does not; a denial it would make is reported by
// Result().ShadowDenied() and counts nothing.
func TestReserveShadowDoesNotShape(t *testing.T) {
	ctx := context.Background()
	clock := limitertest.NewClock()
	l, err := core.NewLimiter(memStore(t, memorystore.WithClock(clock.Now)), []core.Policy{
		{Name: "trial", Key: ipKey(t), Limit: core.PerSecond(10).WithBurst(1), Shadow: true},
	})
	require.NoError(t, err)
	r, err := l.Reserve(ctx, "trial", "a", time.Hour)
	require.NoError(t, err)
	require.True(t, r.OK())
	require.Zero(t, r.Delay())
	pr := r.Result()
	require.False(t, pr.ShadowDenied())
	for range 3 {
		r, err = l.Reserve(ctx, "trial", "a", time.Hour)
		require.NoError(t, err)
		require.True(t, r.OK(), "a shadow policy never refuses")
		require.Zero(t, r.Delay(), "nor makes the caller wait")
		pr = r.Result()
		require.True(t, pr.ShadowDenied())
		require.Equal(t, 100*time.Millisecond, pr.RetryAfter, "no slot was booked behind the denied ones")
		require.NoError(t, r.Cancel(ctx), "cancelling what was not counted does nothing")
	}
	clock.Advance(100 * time.Millisecond)
	pr, err = l.Allow(ctx, "trial", "a")
	require.NoError(t, err)
	require.True(t, pr.Allowed, "the denied reservations counted nothing")
}
