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
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/keyfunc"
)

func memStore(t *testing.T, opts ...memorystore.Option) *memorystore.Store {
	t.Helper()
	s, err := memorystore.New(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// testKeyLevelAllow checks Allow and AllowN on store for every algorithm:
// they share the state the middleware's Check uses for the same identity,
// count all or nothing, peek with n 0, apply overrides, and Reset clears
// what they counted.
func testKeyLevelAllow(t *testing.T, newStore func(t *testing.T) core.Store) {
	ctx := context.Background()
	req := &keyfunc.Static{Remote: "192.0.2.1:1"}
	for _, a := range limitertest.Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			lim := core.PerMinute(4).WithAlgorithm(a)
			l, err := core.NewLimiter(newStore(t), []core.Policy{
				{Name: "per-ip", Key: ipKey(t), Limit: lim},
				{Name: "other", Key: keyfunc.Const("x"), Limit: core.PerMinute(100)},
			})
			require.NoError(t, err)

			d, err := l.Check(ctx, req)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			r, err := l.Allow(ctx, "per-ip", "192.0.2.1")
			require.NoError(t, err)
			require.True(t, r.Allowed)
			require.Equal(t, "per-ip", r.Policy)
			require.Equal(t, lim, r.Limit)
			require.EqualValues(t, 2, r.Remaining, "Allow did not see the request Check counted")

			peek, err := l.AllowN(ctx, "per-ip", "192.0.2.1", 0)
			require.NoError(t, err)
			require.True(t, peek.Allowed)
			require.EqualValues(t, 2, peek.Remaining, "a peek counted")

			r, err = l.AllowN(ctx, "per-ip", "192.0.2.1", 3)
			require.NoError(t, err)
			require.False(t, r.Allowed, "3 units admitted with 2 left")
			require.Greater(t, r.RetryAfter, time.Duration(0))
			r, err = l.AllowN(ctx, "per-ip", "192.0.2.1", 2)
			require.NoError(t, err)
			require.True(t, r.Allowed, "a denied AllowN consumed units")
			require.EqualValues(t, 0, r.Remaining)

			d, err = l.Check(ctx, req)
			require.NoError(t, err)
			require.False(t, d.Allowed, "Check did not see what AllowN counted")
			r, err = l.AllowN(ctx, "per-ip", "192.0.2.1", 5)
			require.NoError(t, err)
			require.True(t, r.Never(), "a cost above the capacity must be RetryNever")

			// Another identity, and another policy, are untouched.
			r, err = l.Allow(ctx, "per-ip", "192.0.2.2")
			require.NoError(t, err)
			require.EqualValues(t, 3, r.Remaining)

			require.NoError(t, l.Reset(ctx, "per-ip", "192.0.2.1"))
			r, err = l.AllowN(ctx, "per-ip", "192.0.2.1", 4)
			require.NoError(t, err)
			require.True(t, r.Allowed, "Reset did not clear the key-level state")

			// An override raises the limit for this identity.
			raised := core.PerMinute(10).WithAlgorithm(a)
			require.NoError(t, l.SetOverride(ctx, "per-ip", "192.0.2.1", raised, time.Now().Add(time.Hour)))
			r, err = l.AllowN(ctx, "per-ip", "192.0.2.1", 7)
			require.NoError(t, err)
			require.True(t, r.Allowed)
			require.Equal(t, raised, r.Limit, "the override's limit is reported")
			require.NoError(t, l.Block(ctx, "per-ip", "192.0.2.1", time.Now().Add(time.Hour)))
			r, err = l.Allow(ctx, "per-ip", "192.0.2.1")
			require.NoError(t, err)
			require.False(t, r.Allowed, "a blocked identity was admitted")
		})
	}
}

func TestKeyLevelAllowMemory(t *testing.T) {
	testKeyLevelAllow(t, func(t *testing.T) core.Store { return memStore(t) })
}

func TestKeyLevelAllowRedis(t *testing.T) {
	c := redistest.StartServer(t).Client(t)
	testKeyLevelAllow(t, func(t *testing.T) core.Store {
		require.NoError(t, c.FlushAll(context.Background()).Err())
		return redisStore(t, c)
	})
}

func TestKeyLevelErrors(t *testing.T) {
	ctx := context.Background()
	l, err := core.NewLimiter(memStore(t), []core.Policy{{Name: "p", Key: ipKey(t), Limit: core.PerSecond(1)}})
	require.NoError(t, err)
	_, err = l.Allow(ctx, "nope", "a")
	require.ErrorContains(t, err, `no policy "nope"`)
	_, err = l.Allow(ctx, "p", "")
	require.ErrorIs(t, err, core.ErrNoKey)
	_, err = l.AllowN(ctx, "p", "a", -1)
	require.ErrorIs(t, err, core.ErrInvalidCost)
	_, err = l.Wait(ctx, "nope", "a")
	require.ErrorContains(t, err, `no policy "nope"`)
	_, err = l.WaitN(ctx, "p", "", 1)
	require.ErrorIs(t, err, core.ErrNoKey)
	_, err = l.WaitN(ctx, "p", "a", 2)
	require.ErrorIs(t, err, core.ErrExceedsCapacity)

	// A cancelled context still decides Allow (the store call is
	// detached), but a Wait does not start.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	r, err := l.Allow(cctx, "p", "a")
	require.NoError(t, err)
	require.True(t, r.Allowed)
	_, err = l.Wait(cctx, "p", "b")
	require.ErrorIs(t, err, context.Canceled)
}

// Every algorithm shapes 12 events of 4 per 100ms through 3 goroutines:
// all are admitted, none before its time.
func TestWaitEveryAlgorithm(t *testing.T) {
	for _, a := range limitertest.Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			t.Parallel()
			l, err := core.NewLimiter(memStore(t), []core.Policy{{Name: "p", Key: ipKey(t), Limit: core.Per(4, 100*time.Millisecond).WithAlgorithm(a)}})
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			start := time.Now()
			var wg sync.WaitGroup
			errs := make(chan error, 12)
			for range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 4 {
						_, err := l.Wait(ctx, "p", "k")
						errs <- err
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			// 12 events at 4 per 100ms: the last needs at least two more
			// periods, or, with fixed windows aligned to the clock, the
			// next two window starts (the first may be a moment away).
			least := 190 * time.Millisecond
			if a == core.FixedWindow {
				least = 95 * time.Millisecond
			}
			require.GreaterOrEqual(t, time.Since(start), least)
		})
	}
}

// Waits across instances on real Redis: 16 goroutines in two Limiter instances
// (each with its own store and connection) wait through one 10/s bucket of
// burst 10, on a single node (three bucket algorithms) and on a Cluster. By
// the store's own clock (Result.At), no stretch of time sees more
// admissions than the bucket promises, and the whole run takes close to the
// ideal time.
func TestWaitAcrossInstancesOnRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	for _, a := range []core.Algorithm{core.TokenBucket, core.GCRA, core.LeakyBucket} {
		t.Run(a.String(), func(t *testing.T) {
			require.NoError(t, srv.Client(t).FlushAll(context.Background()).Err())
			testWaitAcross(t, a, func() redis.UniversalClient { return srv.Client(t) })
		})
	}
	t.Run("cluster", func(t *testing.T) {
		cl := shared.Cluster(t)
		testWaitAcross(t, core.GCRA, func() redis.UniversalClient { return cl.Client(t) })
	})
}

func testWaitAcross(t *testing.T, a core.Algorithm, newClient func() redis.UniversalClient) {
	// 10 waits past the burst: the bucket's pace shows in 1 s, and the
	// run's length is bounded on both sides.
	const rate, burst, total = 10, 10, 20
	lim := core.PerSecond(rate).WithBurst(burst).WithAlgorithm(a)
	var ls [2]*core.Limiter
	for i := range ls {
		var err error
		ls[i], err = core.NewLimiter(redisStore(t, newClient()), []core.Policy{{Name: "out", Key: ipKey(t), Limit: lim}})
		require.NoError(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var (
		mu  sync.Mutex
		ats []int64
		wg  sync.WaitGroup
	)
	id := limitertest.Key(t).Identity
	next := make(chan struct{}, total)
	for range total {
		next <- struct{}{}
	}
	close(next)
	start := time.Now()
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				r, err := ls[g%2].Wait(ctx, "out", id)
				if !assertNoError(t, err) {
					return
				}
				mu.Lock()
				ats = append(ats, r.At)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	require.Len(t, ats, total)
	sort.Slice(ats, func(i, j int) bool { return ats[i] < ats[j] })
	for i := range ats {
		for j := i; j < len(ats); j++ {
			allowed := int64(burst) + (ats[j]-ats[i])*rate/int64(time.Second/time.Microsecond)
			require.LessOrEqualf(t, int64(j-i+1), allowed, "%d admissions in %dµs", j-i+1, ats[j]-ats[i])
		}
	}
	ideal := time.Duration(total-burst) * time.Second / rate // 1s
	require.GreaterOrEqual(t, elapsed, ideal-50*time.Millisecond)
	require.Less(t, elapsed, ideal+ideal/2, "waiters idled: %s for an ideal %s", elapsed, ideal)
	t.Logf("%s: %d admissions through 2 instances in %s (ideal %s)", a, total, elapsed, ideal)
}

func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

func ipKey(t *testing.T) keyfunc.Func {
	t.Helper()
	f := keyfunc.IP()
	return f
}
