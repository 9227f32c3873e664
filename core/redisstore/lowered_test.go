package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestRemainingUnderALoweredLimit: a key counted to 8 under a limit of 10
// and then decided under 3 (a tier cleared, an override or a rule
// lowered) reports 0 remaining on Redis as in memory (core/algo's test of
// the same name), never a negative count: a peek, a take, a cost that can
// never pass.
func TestRemainingUnderALoweredLimit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := New(redistest.StartServer(t).Client(t), WithTimeout(5*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	for _, alg := range []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.GCRA, core.FixedWindow, core.SlidingWindowLog, core.SlidingWindowCounter} {
		key := core.Key{Identity: "user:1", Policy: "lowered-" + alg.String()}
		out := make([]core.Result, 1)
		require.NoError(t, s.Take(ctx, []core.Op{{Key: key, Limit: core.PerHour(10).WithAlgorithm(alg), Cost: 8}}, out))
		require.True(t, out[0].Allowed, alg)
		for _, cost := range []int64{0, 1, 4} {
			require.NoError(t, s.Take(ctx, []core.Op{{Key: key, Limit: core.PerHour(3).WithAlgorithm(alg), Cost: cost}}, out))
			require.False(t, cost > 0 && out[0].Allowed, "%s: cost %d admitted over the lowered limit", alg, cost)
			require.GreaterOrEqual(t, out[0].Remaining, int64(0), "%s: cost %d: %+v", alg, cost, out[0])
		}
	}
}
