package redisstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A TakeEach of 64 one-op takes (one decideMany call) allocates the keys
// of each take and a few objects for the call (14, as before the shorter
// decideMany), nothing more per decision: the reply of each op is decoded
// on the stack (formatting it into an error moved it to the heap once, 64
// more).
func TestTakeEachAllocations(t *testing.T) {
	client := redistest.StartServer(t).Client(t)
	s, err := redisstore.New(client, redisstore.WithTimeout(10*time.Second))
	require.NoError(t, err)
	ctx := context.Background()
	base := limitertest.Key(t).Identity
	l := core.PerSecond(1_000_000_000).WithAlgorithm(core.FixedWindow)
	takes := make([]core.Take, 64)
	for i := range takes {
		takes[i] = core.Take{Ops: []core.Op{{Key: core.Key{Identity: base + strconv.Itoa(i), Policy: "p"}, Limit: l, Cost: 1}}, Out: make([]core.Result, 1)}
	}
	s.TakeEach(ctx, takes) // the library loaded
	allocs := testing.AllocsPerRun(20, func() {
		s.TakeEach(ctx, takes)
	})
	for i := range takes {
		require.NoError(t, takes[i].Err)
		require.True(t, takes[i].Out[0].Allowed)
	}
	t.Logf("%.1f allocations for 64 decisions", allocs)
	bound := len(takes) + 16
	if raceBuild {
		bound += len(takes) // the pooled calls the detector drops, made anew (113-124 measured)
	}
	require.LessOrEqual(t, allocs, float64(bound))
}
