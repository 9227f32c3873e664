package attack

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
)

// TestAttackRemoteStorePairs: concurrent multi-op Takes through the remote
// store (its default batching coalesces them into TakeBatch RPCs), some
// cancelled at random, each touching a pair of identities, on memory and
// Redis: every pair's two counters always show the same use (all or
// nothing survives coalescing), never above the limit; hostile ops (a
// negative or overflowing cost, an invalid limit, a key without identity)
// fail alone and take nothing.
func TestAttackRemoteStorePairs(t *testing.T) {
	addr := newRedis(t)
	lim := core.Limit{Algorithm: core.FixedWindow, Rate: 7, Period: time.Hour}
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			ctx, cancelAll := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancelAll()
			store := memStore(t)
			if backend == "redis" {
				store = redisStore(t, addr)
			}
			s := startStack(t, store, oneLimit("fixed_window", 1))
			key := func(side string, k int) core.Key {
				return core.Key{Identity: fmt.Sprintf("%s-%s%d", backend, side, k), Policy: "pair"}
			}
			const pairs = 4
			var wg sync.WaitGroup
			for g := range 12 {
				wg.Go(func() {
					for n := range 20 {
						k := (g + n) % pairs
						cctx, cancel := context.WithCancel(ctx)
						if n%4 == 3 {
							time.AfterFunc(time.Duration(n*37%500)*time.Microsecond, cancel)
						}
						out := make([]core.Result, 2)
						err := s.remote.Take(cctx, []core.Op{{Key: key("a", k), Limit: lim, Cost: 1}, {Key: key("b", k), Limit: lim, Cost: 1}}, out)
						cancel()
						if err == nil && out[0].Allowed != out[1].Allowed {
							t.Errorf("pair %d split: %+v", k, out)
						}
					}
				})
			}
			// Hostile ops, concurrently: each fails alone and takes nothing.
			for _, bad := range [][]core.Op{
				{{Key: key("a", 0), Limit: lim, Cost: -1}},
				{{Key: key("a", 0), Limit: lim, Cost: math.MaxInt64}, {Key: key("b", 0), Limit: lim, Cost: math.MaxInt64}},
				{{Key: key("a", 0), Limit: core.Limit{Algorithm: core.FixedWindow, Rate: 0, Period: time.Hour}, Cost: 1}},
				{{Key: core.Key{Policy: "pair"}, Limit: lim, Cost: 1}},
				{{Key: key("a", 0), Limit: lim, Cost: 1}, {Key: key("a", 0), Limit: lim, Cost: 1}},
			} {
				out := make([]core.Result, len(bad))
				if err := s.remote.Take(ctx, bad, out); err == nil {
					for i := range out {
						require.False(t, out[i].Allowed, "hostile op admitted: %+v", bad)
					}
				}
			}
			wg.Wait()
			// A cancelled call may still be running in the store: the two
			// sides of a pair agree once it has ended (peeks change nothing),
			// or one was charged for good.
			for k := range pairs {
				out := make([]core.Result, 2)
				require.Eventually(t, func() bool {
					err := s.remote.Take(ctx, []core.Op{{Key: key("a", k), Limit: lim}, {Key: key("b", k), Limit: lim}}, out)
					return err == nil && out[0].Remaining == out[1].Remaining
				}, 2*time.Second, time.Millisecond, "pair %d: one side charged, not the other", k)
				require.GreaterOrEqual(t, out[0].Remaining, int64(0))
			}
		})
	}
}
