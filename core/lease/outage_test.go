package lease_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/lease"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

// With Redis unreachable (its network stalled), an instance decides from
// the block it holds, exactly and without a store call, until the block
// runs out; then the guard's failure mode answers (fail closed); once
// Redis is back, blocks are taken again. The guard is under the lease
// layer, as documented, or over it: both orders decide the held units,
// and no more, through the outage.
func TestOutageDecidesFromHeldBlocks(t *testing.T) {
	srv := redistest.StartServer(t)
	for _, order := range []string{"lease over guard", "guard over lease"} {
		t.Run(order, func(t *testing.T) {
			proxy := redistest.NewProxy(t, srv.Addr)
			clock := limitertest.NewClock()
			s, ls, rs := outageStack(t, proxy.Addr, clock, order == "lease over guard")
			l := core.Per(100_000, time.Hour).WithAlgorithm(core.FixedWindow)
			key := limitertest.Key(t)
			require.Equal(t, 300, takeN(t, s, key, l, time.Hour, 300))
			clock.Advance(time.Millisecond)
			require.Equal(t, 300, takeN(t, s, key, l, time.Hour, 300)) // blocks grown for 300 a ms
			before := ls.Stats()
			proxy.Stall()
			held := decideThroughOutage(t, s, key, l)
			require.Positive(t, held)
			require.EqualValues(t, held, ls.Stats().Local-before.Local, "every admission in the outage came from the block")
			t.Logf("%s: %d decided from the held block while Redis was unreachable, then fail closed", order, held)
			proxy.Sever()                  // Redis back (the stalled connections are lost)
			clock.Advance(2 * time.Second) // past the breaker's cooldown
			admitted := 0
			for range 50 {
				admitted += takeN(t, s, key, l, time.Hour, 1)
				clock.Advance(time.Millisecond)
			}
			require.Greater(t, admitted, 40, "blocks again once Redis is back")
			r, err := limitertest.TakeOne(context.Background(), rs, key, l, 0)
			require.NoError(t, err)
			require.LessOrEqual(t, int64(600+held+admitted), l.Rate-r.Remaining, "the store counted every unit decided")
		})
	}
}

// outageStack is the Redis store at addr under a fail-closed guard, with
// the lease layer over the guard, or under it: the store to decide on, the
// lease layer, and the Redis store.
func outageStack(t *testing.T, addr string, clock *limitertest.Clock, leaseOverGuard bool) (core.Store, *lease.Store, core.Store) {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	rs, err := redisstore.New(client, redisstore.WithClock(clock.Now), redisstore.WithTimeout(time.Second))
	require.NoError(t, err)
	newGuard := func(backend core.Store) *guard.Store {
		g, err := guard.New(backend, guard.WithFailClosed(time.Second), guard.WithTimeout(500*time.Millisecond), guard.WithClock(clock.Now),
			guard.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), guard.WithBreaker(guard.Breaker{Failures: 1, Cooldown: time.Second}))
		require.NoError(t, err)
		t.Cleanup(func() { _ = g.Close() })
		return g
	}
	if leaseOverGuard {
		ls := newLease(t, newGuard(rs), lease.WithClock(clock.Now))
		return ls, ls, rs
	}
	ls := newLease(t, rs, lease.WithClock(clock.Now))
	return newGuard(ls), ls, rs
}

// decideThroughOutage decides key until the failure mode has answered
// three times, and returns the admissions before: from the held block
// (the first op the block cannot serve waits for the guard's timeout, and
// is refused).
func decideThroughOutage(t *testing.T, s core.Store, key core.Key, l core.Limit) int {
	t.Helper()
	held, closed := 0, 0
	for closed < 3 {
		var out [1]core.Result
		require.NoError(t, s.Take(context.Background(), []core.Op{{Key: key, Limit: l, Cost: 1, Lease: time.Hour}}, out[:]))
		switch {
		case out[0].Allowed:
			require.Zero(t, closed, "admitted after the failure mode answered: %+v", out[0])
			require.Equal(t, core.FromStore, out[0].Source)
			held++
		default:
			require.Equal(t, core.FailedClosed, out[0].Source, "%+v", out[0])
			closed++
		}
	}
	return held
}
