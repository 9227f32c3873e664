package lease_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/lease"
	"github.com/sluicehq/sluice/core/limitertest"
)

// takeN decides n ops of cost 1 of key under l through s and returns how
// many were admitted.
func takeN(t *testing.T, s core.Store, key core.Key, l core.Limit, hold time.Duration, n int) int {
	t.Helper()
	admitted := 0
	for range n {
		var out [1]core.Result
		require.NoError(t, s.Take(context.Background(), []core.Op{{Key: key, Limit: l, Cost: 1, Lease: hold}}, out[:]))
		if out[0].Allowed {
			admitted++
		}
	}
	return admitted
}

// free is what the store itself has left of key under l.
func free(t *testing.T, s core.Store, key core.Key, l core.Limit) int64 {
	t.Helper()
	r, err := limitertest.TakeOne(context.Background(), s, key, l, 0)
	require.NoError(t, err)
	return r.Remaining
}

// The units parked at one instance are at most a share of what was left
// when it took them: an instance refused while another holds units finds
// at most that much missing, and gets it once the other's hold has passed
// (an idle instance's block is ended and given back by its sweeper).
func TestParkedUnitsBoundedAndGivenBack(t *testing.T) {
	clock := limitertest.NewClock()
	mem := newMemory(t, clock.Now)
	l := core.Per(100, time.Hour).WithAlgorithm(core.FixedWindow)
	const hold = 100 * time.Millisecond
	opts := []lease.Option{lease.WithClock(clock.Now), lease.WithSweepInterval(time.Hour), lease.WithShare(0.25)}
	a, b := newLease(t, mem, opts...), newLease(t, mem, opts...)
	key := limitertest.Key(t)
	used := 0
	for range 6 { // A's traffic: its blocks grow, each at most a quarter of what is left
		used += takeN(t, a, key, l, hold, 10)
		clock.Advance(time.Millisecond)
	}
	parked := 100 - int(free(t, mem, key, l)) - used
	require.Greater(t, parked, 0, "A holds units")
	require.LessOrEqual(t, parked, 25, "a block is at most a quarter of what was left")
	// B takes all it can: it is refused with A's units still parked.
	got := takeN(t, b, key, l, hold, 200)
	require.Equal(t, 100-used-parked, got)
	// A idles; its hold passes and its sweeper gives its units back; B's
	// repeated denial lasts no longer than a hold.
	clock.Advance(hold)
	b.Tick()
	a.Sweep()
	require.EqualValues(t, parked, a.Stats().GiveBackUnits)
	require.Equal(t, parked, takeN(t, b, key, l, hold, 200), "B gets the units A gave back")
}

// Close gives back the unused units of every block, and then every
// method is ErrClosed.
func TestCloseGivesBack(t *testing.T) {
	clock := limitertest.NewClock()
	mem := newMemory(t, clock.Now)
	l := core.Per(1000, time.Hour).WithAlgorithm(core.SlidingWindowCounter)
	s, err := lease.New(mem, lease.WithClock(clock.Now))
	require.NoError(t, err)
	key := limitertest.Key(t)
	require.Equal(t, 40, takeN(t, s, key, l, time.Minute, 40))
	require.Less(t, free(t, mem, key, l), int64(1000-40), "units parked")
	require.NoError(t, s.Close())
	require.EqualValues(t, 1000-40, free(t, mem, key, l), "all given back")
	require.NoError(t, s.Close(), "idempotent")
	ctx := context.Background()
	for name, err := range map[string]error{
		"Take":          s.Take(ctx, []core.Op{{Key: key, Limit: l, Cost: 1, Lease: time.Second}}, make([]core.Result, 1)),
		"Refund":        s.Refund(ctx, core.Admission{Key: key, Limit: l, Cost: 1}),
		"Reset":         s.Reset(ctx, key, l),
		"SetOverride":   s.SetOverride(ctx, key, core.Override{Until: clock.Now().Add(time.Hour)}),
		"ClearOverride": s.ClearOverride(ctx, key),
	} {
		require.True(t, errors.Is(err, core.ErrClosed), "%s: %v", name, err)
	}
}

// An op under another limit (the policy changed) ends the key's block and
// gives its units back under the limit they were taken under.
func TestChangedLimitEndsTheBlock(t *testing.T) {
	clock := limitertest.NewClock()
	mem := newMemory(t, clock.Now)
	old := core.Per(1000, time.Hour).WithAlgorithm(core.FixedWindow)
	s := newLease(t, mem, lease.WithClock(clock.Now))
	key := limitertest.Key(t)
	require.Equal(t, 30, takeN(t, s, key, old, time.Minute, 30))
	parked := 1000 - 30 - free(t, mem, key, old)
	require.Positive(t, parked)
	require.Equal(t, 1, takeN(t, s, key, old.WithAlgorithm(core.FixedWindow).WithBurst(0), time.Minute, 1)) // the same limit: no change
	require.Zero(t, s.Stats().GivenBack)
	changed := core.Per(500, time.Hour).WithAlgorithm(core.FixedWindow)
	require.Equal(t, 1, takeN(t, s, key, changed, time.Minute, 1))
	s.Drain()
	require.EqualValues(t, parked-1, s.Stats().GiveBackUnits, "the old block's units left, given back")
}

// An override set through one instance ends its block at once, and the
// key is decided by the store under it; another instance's block decides
// from its units until its hold ends, and no longer.
func TestOverrideEndsBlocks(t *testing.T) {
	clock := limitertest.NewClock()
	mem := newMemory(t, clock.Now)
	l := core.Per(1000, time.Hour).WithAlgorithm(core.FixedWindow)
	const hold = 100 * time.Millisecond
	opts := []lease.Option{lease.WithClock(clock.Now), lease.WithSweepInterval(time.Hour)}
	a, b := newLease(t, mem, opts...), newLease(t, mem, opts...)
	key := limitertest.Key(t)
	require.Equal(t, 30, takeN(t, a, key, l, hold, 30))
	require.Equal(t, 30, takeN(t, b, key, l, hold, 30))
	ctx := context.Background()
	require.NoError(t, a.SetOverride(ctx, key, core.Override{Until: clock.Now().Add(time.Hour)})) // a block
	require.Zero(t, takeN(t, a, key, l, hold, 5), "the block applies at once where it was set")
	fromB := takeN(t, b, key, l, hold, 100)
	require.Positive(t, fromB, "B spends its units until its hold ends")
	require.Less(t, fromB, 30)
	clock.Advance(hold)
	require.Zero(t, takeN(t, b, key, l, hold, 5), "and then is blocked")
	// A raise is decided by the store, exactly, under the override's limit.
	raise := core.Per(5, time.Hour).WithAlgorithm(core.FixedWindow)
	require.NoError(t, a.SetOverride(ctx, key, core.Override{Limit: raise, Until: clock.Now().Add(time.Hour)}))
	var out [1]core.Result
	for i := range 7 {
		require.NoError(t, a.Take(ctx, []core.Op{{Key: key, Limit: l, Cost: 1, Lease: hold}}, out[:]))
		require.Equal(t, i < 5, out[0].Allowed, "op %d under the raise: %+v", i, out[0])
		require.NotNil(t, out[0].Applied)
	}
}

// An op under an invalid limit is refused by the store below, and the
// key's next op under a valid one is leased again.
func TestInvalidLimitThenValid(t *testing.T) {
	clock := limitertest.NewClock()
	mem := newMemory(t, clock.Now)
	s := newLease(t, mem, lease.WithClock(clock.Now))
	key := limitertest.Key(t)
	l := core.Per(1000, time.Hour).WithAlgorithm(core.FixedWindow)
	require.Equal(t, 10, takeN(t, s, key, l, time.Minute, 10))
	var out [1]core.Result
	err := s.Take(context.Background(), []core.Op{{Key: key, Limit: core.Per(0, time.Hour), Cost: 1, Lease: time.Minute}}, out[:])
	require.ErrorIs(t, err, core.ErrInvalidLimit)
	before := s.Stats().Local
	require.Equal(t, 50, takeN(t, s, key, l, time.Minute, 50))
	require.Greater(t, s.Stats().Local, before, "leased again")
}

// Two instances whose traffic is 3 to 1 on a limit their traffic
// exceeds: each is admitted in proportion to its traffic, as one store
// deciding every request would.
func TestSharesFollowTraffic(t *testing.T) {
	clock := limitertest.NewClock()
	mem := newMemory(t, clock.Now)
	l := core.Per(200, 100*time.Millisecond).WithAlgorithm(core.FixedWindow)
	opts := []lease.Option{lease.WithClock(clock.Now), lease.WithSweepInterval(time.Hour)}
	a, b := newLease(t, mem, opts...), newLease(t, mem, opts...)
	key := limitertest.Key(t)
	rng := rand.New(rand.NewPCG(1, 2))
	var got [2]int
	for range 40_000 { // 400 µs apart on average: 2500/s offered, 2000/s admitted
		clock.Advance(time.Duration(rng.Int64N(80)) * 10 * time.Microsecond)
		i, s := 0, a
		if rng.IntN(4) == 0 {
			i, s = 1, b
		}
		got[i] += takeN(t, s, key, l, 20*time.Millisecond, 1)
	}
	ratio := float64(got[0]) / float64(got[1])
	t.Logf("admitted %d and %d (%.2f to 1); A: %+v", got[0], got[1], ratio, a.Stats())
	require.InDelta(t, 3, ratio, 0.5, "admissions in proportion to traffic")
}
