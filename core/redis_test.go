package core_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/keyfunc"
)

func redisStore(t *testing.T, c redis.UniversalClient) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(c, redisstore.WithTimeout(5*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// Idempotency on real Redis: 64 concurrent repeats of one request,
// standalone and on a Cluster.
func TestIdempotencyConcurrentRepeatsOnRedis(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		testConcurrentRepeats(t, redisStore(t, redistest.StartServer(t).Client(t)))
	})
	t.Run("cluster", func(t *testing.T) {
		testConcurrentRepeats(t, redisStore(t, shared.Cluster(t).Client(t)))
	})
}

// Refunds during an override, on real Redis: standalone,
// behind the guard, and on a Cluster (where a group of two identities is
// two scripts, and a denied group is undone by compensation).
func TestRefundUnderOverrideOnRedis(t *testing.T) {
	factory := func(c redis.UniversalClient, guarded bool) storeFactory {
		return func(t *testing.T, clock func() time.Time) core.Store {
			s, err := redisstore.New(c, redisstore.WithTimeout(5*time.Second), redisstore.WithClock(clock))
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			if !guarded {
				return s
			}
			g, err := guard.New(s, guard.WithTimeout(5*time.Second))
			require.NoError(t, err)
			t.Cleanup(func() { g.Close() })
			return g
		}
	}
	standalone := redistest.StartServer(t).Client(t)
	t.Run("standalone", func(t *testing.T) { testRefundUnderOverride(t, factory(standalone, false)) })
	t.Run("guard", func(t *testing.T) { testRefundUnderOverride(t, factory(standalone, true)) })
	t.Run("cluster", func(t *testing.T) {
		cluster := shared.Cluster(t).Client(t)
		testRefundUnderOverride(t, factory(cluster, false))
		t.Run("concurrent", func(t *testing.T) { testRefundUnderOverrideConcurrent(t, factory(cluster, false)) })
	})
	t.Run("standalone/concurrent", func(t *testing.T) { testRefundUnderOverrideConcurrent(t, factory(standalone, false)) })
}

// An override's limit is what the Decision describes, on real Redis.
func TestOverrideIsTheLimitDescribedOnRedis(t *testing.T) {
	testOverrideDescribed(t, redisStore(t, redistest.StartServer(t).Client(t)))
}

// A request whose context is already cancelled (the client
// went away) is still counted, on Redis alone and behind the guard.
func TestCancelledRequestIsCounted(t *testing.T) {
	client := redistest.StartServer(t).Client(t)
	rs := redisStore(t, client)
	g, err := guard.New(rs, guard.WithTimeout(5*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { g.Close() })
	for _, c := range []struct {
		name  string
		store core.Store
	}{{"redis", rs}, {"guard", g}} {
		t.Run(c.name, func(t *testing.T) {
			run := fmt.Sprint(c.name, time.Now().UnixNano())
			l, err := core.NewLimiter(c.store, []core.Policy{
				{Name: "hourly", Key: keyfunc.Header("U"), Limit: core.PerHour(5)},
				{Name: "global", Key: keyfunc.Const("g" + run), Limit: core.PerHour(1000), Refund: core.RefundFailed},
			})
			require.NoError(t, err)
			l1, err := core.NewLimiter(c.store, []core.Policy{{Name: "hourly", Key: keyfunc.Header("U"), Limit: core.PerHour(5)}})
			require.NoError(t, err)
			for _, lim := range []*core.Limiter{l, l1} {
				user := fmt.Sprint("u", time.Now().UnixNano())
				r := keyfunc.Static{Headers: map[string][]string{"U": {user}}}
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				allowed := 0
				for range 10 {
					d, err := lim.Check(ctx, r)
					require.NoError(t, err, "a cancelled request is decided, not failed")
					require.False(t, d.Degraded(), "and decided by the store")
					if d.Allowed {
						allowed++
					}
				}
				require.Equal(t, 5, allowed)
				d, err := lim.Check(context.Background(), r)
				require.NoError(t, err)
				require.False(t, d.Allowed, "the cancelled requests were counted")
			}
			// A refund on a cancelled context is made too.
			r := keyfunc.Static{Headers: map[string][]string{"U": {"refund" + run}}}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			d, err := l.Check(ctx, r)
			require.NoError(t, err)
			require.NoError(t, l.Refund(ctx, &d, 500))
			p, err := l.Peek(context.Background(), r)
			require.NoError(t, err)
			require.Equal(t, d.Results[1].Remaining+1, p.Results[1].Remaining, "refunded")
		})
	}
}
