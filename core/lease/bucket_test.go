package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/lease"
	"github.com/sluicehq/sluice/core/limitertest"
)

// A bucket's unused units are never given back: B's block lies under A's
// in the bucket, so giving B's unit back when B closes would lower A's
// units with it, and A, spending its last unit where the bucket had it
// before, would let C take a whole burst on top: 7 units in a bucket of 6
// (a refund of B's unit, exact for B alone, over-admits by one here).
// With the unit dropped the three never admit more than the algorithm.
func TestBucketBlockNotGivenBack(t *testing.T) {
	clock := limitertest.NewClock()
	mem := newMemory(t, clock.Now)
	l := core.Per(1, time.Second).WithBurst(6)
	key := limitertest.Key(t)
	ctx := context.Background()
	ref := newReference(t, l)
	inst := func() *lease.Store {
		return newLease(t, mem, lease.WithClock(clock.Now), lease.WithShare(1), lease.WithMaxBlock(2), lease.WithSweepInterval(time.Hour))
	}
	a, b := inst(), inst()
	take := func(s *lease.Store, want core.Source) {
		t.Helper()
		var out [1]core.Result
		require.NoError(t, s.Take(ctx, []core.Op{{Key: key, Limit: l, Cost: 1, Lease: 10 * time.Second}}, out[:]))
		require.True(t, out[0].Allowed, "%+v", out[0])
		ref.admit(clock.Now().UnixMicro(), 1, "a leased unit")
		require.Equal(t, want, out[0].Source)
	}
	take(b, core.FromStore) // exact
	clock.Advance(time.Microsecond)
	take(b, core.FromStore) // a block of 2: B holds one unit
	clock.Advance(time.Microsecond)
	take(a, core.FromStore)
	clock.Advance(time.Microsecond)
	take(a, core.FromStore) // a block of 2 on top of B's: A holds one unit
	require.EqualValues(t, 2, a.Stats().Takes)
	require.NoError(t, b.Close()) // B's unit is not given back
	require.EqualValues(t, 0, b.Stats().GivenBack)
	require.EqualValues(t, 1, b.Stats().Dropped)
	clock.Advance(5*time.Second - 4*time.Microsecond)
	before := a.Stats().Local
	take(a, core.FromStore) // A spends its unit just before its deadline, from its block
	require.Equal(t, before+1, a.Stats().Local)
	clock.Advance(10 * time.Microsecond)
	// C, deciding exactly, takes what the store lets it.
	for n := int64(6); n > 0; n-- {
		r, err := limitertest.TakeOne(ctx, mem, key, l, n)
		require.NoError(t, err)
		if r.Allowed {
			ref.admit(clock.Now().UnixMicro(), n, "C's take")
			require.EqualValues(t, 5, n, "the store lets C take what the bucket has")
			break
		}
	}
}
