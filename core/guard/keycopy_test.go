package guard_test

import (
	"context"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/memorystore"
)

// The deny cache keeps copies of its keys, which may alias
// a request's buffers (Fiber's do) that the framework then reuses.
func TestDenyCacheCopiesKeys(t *testing.T) {
	backend, err := memorystore.New()
	require.NoError(t, err)
	defer backend.Close()
	g, err := guard.New(backend, guard.WithDenyCache(guard.DenyCache{MaxKeys: 100}))
	require.NoError(t, err)
	defer g.Close()
	ctx := context.Background()
	lim := core.PerHour(1)
	ops := func(k core.Key) []core.Op {
		return []core.Op{{Key: k, Limit: lim, Cost: 1}, {Key: core.Key{Identity: "other", Policy: "p"}, Limit: core.PerHour(100), Cost: 1}}
	}
	// aliased returns key in a buffer of its own, scribbled over by done.
	aliased := func(key string) (string, func()) {
		b := []byte(key)
		return unsafe.String(&b[0], len(b)), func() { copy(b, make([]byte, len(b))) }
	}
	for _, group := range []bool{false, true} {
		policy := "single"
		if group {
			policy = "group"
		}
		// Both parts of the key alias buffers.
		key := func() (core.Key, func()) {
			id, doneID := aliased("alice")
			p, doneP := aliased(policy)
			return core.Key{Identity: id, Policy: p}, func() { doneID(); doneP() }
		}
		for i := range 2 { // admitted, then denied (and cached)
			k, done := key()
			if group {
				out := make([]core.Result, 2)
				require.NoError(t, g.Take(ctx, ops(k), out))
				require.Equal(t, i == 0, out[0].Allowed)
			} else {
				res, err := limitertest.TakeOne(ctx, g, k, lim, 1)
				require.NoError(t, err)
				require.Equal(t, i == 0, res.Allowed)
			}
			done()
		}
		hits := g.Stats().DenyCacheHits
		k, done := key()
		if group {
			out := make([]core.Result, 2)
			require.NoError(t, g.Take(ctx, ops(k), out))
			require.False(t, out[0].Allowed)
		} else {
			res, err := limitertest.TakeOne(ctx, g, k, lim, 1)
			require.NoError(t, err)
			require.False(t, res.Allowed)
		}
		done()
		require.Equal(t, hits+1, g.Stats().DenyCacheHits, "group %v: the cached denial is found under its key", group)
	}
}
