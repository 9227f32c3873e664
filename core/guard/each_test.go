package guard_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

// eachTakes returns n takes on keys named after prefix: one op of cost 1
// under l, every third a group of two identities.
func eachTakes(prefix string, n int, l core.Limit) []core.Take {
	takes := make([]core.Take, n)
	for i := range takes {
		ops := []core.Op{{Key: core.Key{Identity: fmt.Sprintf("%s-%d", prefix, i), Policy: "p"}, Limit: l, Cost: 1}}
		if i%3 == 2 {
			ops = append(ops, core.Op{Key: core.Key{Identity: fmt.Sprintf("%s-%d-b", prefix, i), Policy: "p"}, Limit: l, Cost: 1})
		}
		takes[i] = core.Take{Ops: ops, Out: make([]core.Result, len(ops))}
	}
	return takes
}

// TestTakeEachThroughTheGuard: over the Redis store, a TakeEach through
// the guard decides each take as Take does, in one call of the backend:
// the deny cache answers the takes it knows without Redis; when Redis
// answers too late, every take the backend was to decide is answered by
// the failure mode and counted as a failure, after one timeout, not one
// per take; while the circuit is open no take reaches the backend.
func TestTakeEachThroughTheGuard(t *testing.T) {
	const timeout = 200 * time.Millisecond
	srv := redistest.StartServer(t)
	proxy := newFaultProxy(t, srv.Addr)
	client := redis.NewClient(clientOptions(proxy.Addr, true))
	t.Cleanup(func() { client.Close() })
	rs, err := redisstore.New(client, redisstore.WithTimeout(timeout))
	require.NoError(t, err)
	t.Cleanup(func() { rs.Close() })
	var obs transitions
	g := newGuard(t, rs, guard.WithTimeout(timeout), guard.WithFailClosed(0), guard.WithObserver(&obs),
		guard.WithDenyCache(guard.DenyCache{MaxKeys: 1000}), guard.WithBreaker(guard.Breaker{Failures: 30, Cooldown: time.Hour}),
		guard.WithLogger(slog.New(slog.DiscardHandler)))
	ctx := context.Background()
	l := core.PerMinute(2)
	// The first call connects and loads the code.
	require.Eventually(t, func() bool {
		r, err := takeID(ctx, g, "warm", l, 1)
		return err == nil && r.Source == core.FromStore
	}, 5*time.Second, time.Millisecond)

	// Three rounds: admitted twice, then denied by Redis (and cached).
	for round := range 3 {
		takes := eachTakes("e", 12, l)
		twins := eachTakes("twin", 12, l)
		calls := g.Stats().BackendCalls
		g.TakeEach(ctx, takes)
		require.Equal(t, calls+12, g.Stats().BackendCalls, "round %d: every take went to the backend", round)
		for i := range takes {
			require.NoError(t, takes[i].Err)
			require.NoError(t, g.Take(ctx, twins[i].Ops, twins[i].Out))
			for j := range takes[i].Out {
				got, want := takes[i].Out[j], twins[i].Out[j]
				require.Equal(t, round < 2, got.Allowed, "round %d take %d", round, i)
				require.Equal(t, core.FromStore, got.Source)
				require.Equal(t, want.Allowed, got.Allowed)
				require.Equal(t, want.Remaining, got.Remaining)
				require.Equal(t, want.State, got.State)
			}
		}
	}
	// The denials of one op are cached: a fourth round of those takes does
	// not reach Redis.
	var cached []core.Take
	for i, tk := range eachTakes("e", 12, l) {
		if i%3 != 2 {
			cached = append(cached, tk)
		}
	}
	calls, hits := g.Stats().BackendCalls, g.Stats().DenyCacheHits
	g.TakeEach(ctx, cached)
	require.Equal(t, calls, g.Stats().BackendCalls, "the deny cache answered")
	require.Equal(t, hits+uint64(len(cached)), g.Stats().DenyCacheHits)
	for i := range cached {
		require.NoError(t, cached[i].Err)
		require.False(t, cached[i].Out[0].Allowed)
	}

	// Redis answers too late: every take fails closed, after one timeout.
	proxy.SetLatency(10 * timeout)
	late := eachTakes("late", 12, l)
	before := obs.timeouts()
	start := time.Now()
	g.TakeEach(ctx, late)
	took := time.Since(start)
	require.GreaterOrEqual(t, took, timeout)
	require.Less(t, took, 10*timeout, "one timeout for the whole call")
	for i := range late {
		require.NoError(t, late[i].Err)
		for _, r := range late[i].Out {
			require.Equal(t, core.FailedClosed, r.Source, "take %d", i)
			require.False(t, r.Allowed)
		}
	}
	require.Equal(t, before+12, obs.timeouts(), "each take's failure counted")

	// The circuit opens at its 30th failure: then nothing reaches Redis.
	g.TakeEach(ctx, eachTakes("late2", 18, l))
	require.Equal(t, guard.Open, g.Circuit())
	calls = g.Stats().BackendCalls
	start = time.Now()
	open := eachTakes("open", 12, l)
	g.TakeEach(ctx, open)
	require.Less(t, time.Since(start), timeout, "an open circuit does not wait")
	require.Equal(t, calls, g.Stats().BackendCalls)
	for i := range open {
		require.NoError(t, open[i].Err)
		require.Equal(t, core.FailedClosed, open[i].Out[0].Source)
	}
	proxy.SetLatency(0)
}
