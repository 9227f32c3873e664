package attack

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/engine"
)

// TestAttackEvictionFlood: on a bounded memory store (ratelimitd's
// --memory-max-keys), a caller who spent its limit floods the store with
// thousands of fresh identities (one check each) to have its own counter
// evicted: it must stay denied, for each algorithm.
func TestAttackEvictionFlood(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, algorithm := range algorithms {
		t.Run(algorithm, func(t *testing.T) {
			store, err := memorystore.New(memorystore.WithMaxKeys(256), memorystore.WithShards(4))
			require.NoError(t, err)
			t.Cleanup(func() { store.Close() })
			s := startStack(t, store, oneLimit(algorithm, 20))
			spend := func(user string, n int) int {
				admitted := 0
				for range n {
					r, err := s.eng.Check(ctx, engine.Check{Dimension: "user", Identifier: user, Cost: 1})
					require.NoError(t, err)
					if r.Allowed {
						admitted++
					}
				}
				return admitted
			}
			require.Equal(t, 20, spend("mallory", 25))
			require.Equal(t, 19, spend("eve", 19)) // one short of throttled
			for i := range 5000 {
				spend(fmt.Sprintf("flood-%d", i), 1)
			}
			require.Equal(t, 0, spend("mallory", 5), "a flood of fresh identities evicted a spent counter")
			require.LessOrEqual(t, spend("eve", 5), 1, "a flood of fresh identities evicted a nearly spent counter")
		})
	}
}
