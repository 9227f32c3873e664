package memorystore

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
)

// A throttled key is decided on a copy of its state taken under the lock
// (decideOne), and what that decision changes is written only if the state
// is still the one decided on. Four goroutines flood one throttled key
// while the clock moves one emission interval at a time: each step must
// admit exactly one more request, never two (a refill written twice from
// the same copy) and never none (a lost write), for every bucket.
func TestThrottledKeyAdmitsEachRefillOnce(t *testing.T) {
	for _, a := range []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.GCRA} {
		t.Run(a.String(), func(t *testing.T) {
			var now atomic.Int64
			now.Store(1_700_000_000_000_000)
			s, err := New(WithClock(func() time.Time { return time.UnixMicro(now.Load()) }), WithSweepInterval(0))
			require.NoError(t, err)
			defer s.Close()
			l := core.PerSecond(100).WithBurst(10).WithAlgorithm(a) // one unit every 10 ms
			ops := []core.Op{{Key: core.Key{Identity: "hot"}, Limit: l, Cost: 1}}
			take := func() bool {
				out := make([]core.Result, 1)
				require.NoError(t, s.Take(context.Background(), ops, out))
				return out[0].Allowed
			}
			for range 10 {
				require.True(t, take())
			}
			require.False(t, take(), "the burst is spent: the key is throttled")

			var admitted atomic.Int64
			var stop atomic.Bool
			var wg sync.WaitGroup
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for !stop.Load() {
						if take() {
							admitted.Add(1)
						}
					}
				}()
			}
			defer func() { // before Close, also when the test fails
				stop.Store(true)
				wg.Wait()
			}()
			const steps = 200
			for k := int64(1); k <= steps; k++ {
				now.Add(10_000)
				deadline := time.Now().Add(10 * time.Second)
				for admitted.Load() < k && time.Now().Before(deadline) {
					runtime.Gosched()
				}
				require.Equal(t, k, admitted.Load(), "after %d refills", k)
			}
			stop.Store(true)
			wg.Wait()
			require.Equal(t, int64(steps), admitted.Load(), "one admission per refill")
			require.False(t, take())
		})
	}
}

// A throttled key denied again changes nothing, but a decision on it that
// does change its state (a refill admitted, a cost beyond the key's
// capacity leaves it as it is) is stored, and the key's next decision
// sees it.
func TestThrottledKeyStoresWhatItChanges(t *testing.T) {
	now := int64(1_700_000_000_000_000)
	s := newTestStore(t, &now)
	ctx := context.Background()
	l := core.PerSecond(10).WithBurst(2)
	do := func(cost int64) core.Result {
		out := make([]core.Result, 1)
		require.NoError(t, s.Take(ctx, []core.Op{{Key: core.Key{Identity: "k"}, Limit: l, Cost: cost}}, out))
		return out[0]
	}
	require.True(t, do(2).Allowed)
	r := do(1)
	require.False(t, r.Allowed)
	require.Equal(t, core.Throttled, r.State)
	require.Equal(t, 100*time.Millisecond, r.RetryAfter)
	require.False(t, do(3).Allowed, "beyond the capacity")
	now += 50_000
	r = do(1)
	require.False(t, r.Allowed)
	require.Equal(t, 50*time.Millisecond, r.RetryAfter, "the denials stored nothing")
	now += 50_000
	require.True(t, do(1).Allowed, "the refill, admitted from a throttled state")
	r = do(1)
	require.False(t, r.Allowed, "and stored")
	require.Equal(t, 100*time.Millisecond, r.RetryAfter)
}

// A throttled key's decisions, denials on the copy and the refills written
// under the lock again, allocate nothing, for every algorithm decided that
// way.
func TestThrottledKeyDoesNotAllocate(t *testing.T) {
	now := int64(1_700_000_000_000_000)
	s := newTestStore(t, &now)
	ctx := context.Background()
	for _, a := range []core.Algorithm{core.TokenBucket, core.FixedWindow, core.SlidingWindowCounter, core.GCRA, core.LeakyBucket} {
		l := core.PerSecond(1).WithAlgorithm(a)
		ops := [1]core.Op{{Key: core.Key{Identity: "hot"}, Limit: l, Cost: 1}}
		var out [1]core.Result
		require.NoError(t, s.Take(ctx, ops[:], out[:]))
		require.NoError(t, s.Take(ctx, ops[:], out[:]))
		require.False(t, out[0].Allowed, "%s: throttled", a)
		i := 0
		allocs := testing.AllocsPerRun(1000, func() {
			if i++; i%10 == 0 {
				now += 1_000_000 // a refill every tenth decision
			}
			if err := s.Take(ctx, ops[:], out[:]); err != nil {
				t.Fatal(err)
			}
		})
		require.Zero(t, allocs, a.String())
	}
}
