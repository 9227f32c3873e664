package attack

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/service/ratelimitv1"
)

// TestAttackIdempotencyReplay: an idempotency key makes a repeat of an
// admitted check free (a bounded number of times), and nothing else: a
// replay with another cost, identifier, endpoint or through Report is
// counted; a denied check's key buys nothing; concurrent replays of one
// key get at most the repeat bound free. Memory and Redis.
func TestAttackIdempotencyReplay(t *testing.T) {
	addr := newRedis(t)
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			store := memStore(t)
			if backend == "redis" {
				store = redisStore(t, addr)
			}
			s := startStack(t, store, oneLimit("fixed_window", 20))
			c := s.native
			check := func(user, key string, cost int64) *ratelimitv1.CheckResponse {
				r, err := c.CheckRateLimit(ctx, &ratelimitv1.CheckRequest{Dimension: "user", Identifier: user, Cost: proto.Int64(cost), IdempotencyKey: key})
				require.NoError(t, err)
				return r
			}
			remaining := func(user string) int64 {
				r, err := c.GetRemainingQuota(ctx, &ratelimitv1.CheckRequest{Dimension: "user", Identifier: user})
				require.NoError(t, err)
				return r.GetRemaining()
			}
			u := "idem-" + backend
			require.True(t, check(u, "K", 1).GetAllowed())
			require.Equal(t, int64(19), remaining(u))
			for range 3 { // the repeat bound: free
				require.True(t, check(u, "K", 1).GetAllowed())
			}
			require.Equal(t, int64(19), remaining(u))
			check(u, "K", 1) // past the bound: counted
			require.Equal(t, int64(18), remaining(u))
			check(u, "K", 2) // another cost: counted
			require.Equal(t, int64(16), remaining(u))
			check(u+"-other", "K", 1) // another identifier: counted there
			require.Equal(t, int64(19), remaining(u+"-other"))
			require.Equal(t, int64(16), remaining(u))
			r, err := c.CheckRateLimit(ctx, &ratelimitv1.CheckRequest{Dimension: "user", Identifier: u, Endpoint: "/elsewhere", Cost: proto.Int64(1), IdempotencyKey: "K"})
			require.NoError(t, err) // another endpoint: counted
			require.True(t, r.GetAllowed())
			require.Equal(t, int64(15), remaining(u))
			r, err = c.Report(ctx, &ratelimitv1.CheckRequest{Dimension: "user", Identifier: u, Cost: proto.Int64(1), IdempotencyKey: "K2"})
			require.NoError(t, err)
			require.True(t, r.GetAllowed())
			require.Equal(t, int64(14), remaining(u))

			// A denied check's key: its replays are denied too, and take nothing.
			require.False(t, check(u, "BIG", 100).GetAllowed())
			for range 5 {
				require.False(t, check(u, "BIG", 100).GetAllowed())
			}
			require.Equal(t, int64(14), remaining(u))

			// Concurrent replays of one fresh key: one counted, at most 3 free,
			// the rest counted like any check.
			v := "idem-conc-" + backend
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for range 10 {
				wg.Go(func() {
					r, err := c.CheckRateLimit(ctx, &ratelimitv1.CheckRequest{Dimension: "user", Identifier: v, Cost: proto.Int64(4), IdempotencyKey: "SAME"})
					if assertNoErr(t, err) && r.GetAllowed() {
						admitted.Add(1)
					}
				})
			}
			wg.Wait()
			charged := 20 - remaining(v)
			require.Equal(t, int64(0), charged%4)
			require.LessOrEqual(t, admitted.Load(), charged/4+3, "more free repeats than the bound")
			require.LessOrEqual(t, charged, int64(20))
		})
	}
}
