package memorystore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
)

// Overrides that ended are dropped as new ones are set (amortized), so a
// long-running store that sees many short overrides does not keep them
// all; those still in force stay.
func TestEndedOverridesAreDropped(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	s, err := New(WithClock(clock))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	size := func() int {
		s.ovMu.RLock()
		defer s.ovMu.RUnlock()
		return len(s.overrides)
	}
	long := core.Key{Identity: "kept", Policy: "p"}
	require.NoError(t, s.SetOverride(ctx, long, core.Override{Limit: core.PerHour(7), Until: now.Add(time.Hour)}))
	most := 0
	for round := range 20 {
		for i := range 100 {
			k := core.Key{Identity: fmt.Sprintf("r%d-%d", round, i), Policy: "p"}
			require.NoError(t, s.SetOverride(ctx, k, core.Override{Until: clock().Add(time.Second)}))
			most = max(most, size())
		}
		mu.Lock()
		now = now.Add(2 * time.Second)
		mu.Unlock()
	}
	require.LessOrEqual(t, most, 400, "2000 overrides set, at most ~100 in force at once")
	res := make([]core.Result, 1)
	require.NoError(t, s.Take(ctx, []core.Op{{Key: long, Limit: core.PerHour(1), Cost: 1}}, res))
	require.EqualValues(t, 7, res[0].Capacity, "the override in force was kept")
}
