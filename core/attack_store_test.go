package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/storekit"
	"github.com/sluicehq/sluice/internal/redistest"
)

// attackStores returns the stores the Store contract attacks run on: memory,
// Redis, a 3-master Cluster, and a guard in front of memory.
func attackStores(t *testing.T) map[string]func(t *testing.T) core.Store {
	srv := redistest.StartServer(t)
	return map[string]func(t *testing.T) core.Store{
		"memory":  func(t *testing.T) core.Store { return memStore(t) },
		"redis":   func(t *testing.T) core.Store { return redisStore(t, srv.Client(t)) },
		"cluster": func(t *testing.T) core.Store { return redisStore(t, shared.Cluster(t).Client(t)) },
		"guard": func(t *testing.T) core.Store {
			g, err := guard.New(memStore(t), guard.WithFailClosed(time.Second))
			require.NoError(t, err)
			return g
		},
	}
}

// A Take whose ops share a Key is an error naming the ops, and counts
// nothing: each op was decided against its Key's state before the Take, so
// two takes of 3 of a limit of 5 were both admitted and 6 units passed
// (every store, every algorithm).
func TestAttackTakeOpsSharingAKey(t *testing.T) {
	ctx := context.Background()
	for name, newStore := range attackStores(t) {
		t.Run(name, func(t *testing.T) {
			s := newStore(t)
			for _, a := range limitertest.Algorithms {
				t.Run(a.String(), func(t *testing.T) {
					k, other := limitertest.Key(t), limitertest.Key(t)
					l := core.PerMinute(5).WithAlgorithm(a)
					for _, ops := range [][]core.Op{
						{{Key: k, Limit: l, Cost: 3}, {Key: k, Limit: l, Cost: 3}},
						{{Key: k, Limit: l, Cost: 1}, {Key: other, Limit: l, Cost: 1}, {Key: k, Limit: l, Cost: 0}},
					} {
						err := s.Take(ctx, ops, make([]core.Result, len(ops)))
						require.ErrorIs(t, err, core.ErrInvalidCost)
						require.ErrorContains(t, err, "op 0 has the same Key")
					}
					// Nothing was counted: 5 units of each still pass.
					for _, k := range []core.Key{k, other} {
						r, err := limitertest.TakeOne(ctx, s, k, l, 5)
						require.NoError(t, err)
						require.True(t, r.Allowed, "a refused Take counted something")
					}
				})
			}
		})
	}
	require.NoError(t, storekit.ValidateGroup([]core.Op{{Key: core.Key{Identity: "a", Policy: "p"}}, {Key: core.Key{Identity: "a", Policy: "q"}}}))
}

// The shapes a careless caller passes: no ops, fewer or more results than
// ops. They are errors or nothing, never a panic.
func TestAttackTakeShapes(t *testing.T) {
	ctx := context.Background()
	for name, newStore := range attackStores(t) {
		t.Run(name, func(t *testing.T) {
			s := newStore(t)
			require.NoError(t, s.Take(ctx, nil, nil))
			k := limitertest.Key(t)
			op := core.Op{Key: k, Limit: core.PerMinute(5), Cost: 1}
			require.Error(t, s.Take(ctx, []core.Op{op}, nil))
			require.Error(t, s.Take(ctx, []core.Op{op, op}, make([]core.Result, 1)))
			require.Error(t, s.Take(ctx, []core.Op{op}, make([]core.Result, 2)))
			r, err := limitertest.TakeOne(ctx, s, k, op.Limit, 5)
			require.NoError(t, err)
			require.True(t, r.Allowed, "a refused Take counted something")
		})
	}
}
