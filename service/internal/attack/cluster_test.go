package attack

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/ratelimitv1"
)

// TestAttackClusterAllOrNothing: on a Redis Cluster an all-or-nothing
// batch of several users is decided by one script per user's slot, and a
// denial undoes the others' admissions. Concurrent batches over
// overlapping users, on two instances, never leave a user charged for a
// batch that was denied: at the end every user's use is exactly the units
// of the batches admitted, and never above the limit.
func TestAttackClusterAllOrNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := redistest.StartCluster(t, 3)
	mk := func() *stack {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
		t.Cleanup(func() { c.Close() })
		s, err := redisstore.New(c, redisstore.WithTimeout(5*time.Second))
		require.NoError(t, err)
		return startStack(t, s, oneLimit("fixed_window", 12))
	}
	stacks := []*stack{mk(), mk()}
	const users = 6
	var charged [users]atomic.Int64 // units admitted per user
	var wg sync.WaitGroup
	for g := range 8 {
		s := stacks[g%2]
		wg.Go(func() {
			for n := range 20 {
				a, b, c := (g+n)%users, (g+2*n+1)%users, (g+3*n+2)%users
				idx := []int{a, b, c}
				var checks []*ratelimitv1.CheckRequest
				for _, u := range idx {
					checks = append(checks, &ratelimitv1.CheckRequest{Dimension: "user", Identifier: fmt.Sprintf("cl-%d", u), Cost: proto.Int64(1)})
				}
				resp, err := s.native.CheckRateLimitBatch(ctx, &ratelimitv1.BatchRequest{Checks: checks, AllOrNothing: true})
				if !assertNoErr(t, err) {
					return
				}
				ok := resp.GetResults()[0].GetResponse().GetAllowed()
				for _, res := range resp.GetResults() {
					if res.GetResponse().GetAllowed() != ok {
						t.Errorf("batch split: %v", resp)
						return
					}
				}
				if ok {
					for _, u := range idx {
						charged[u].Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	for u := range users {
		rs, errs := stacks[0].eng.CheckBatch(ctx, []engine.Check{{Dimension: "user", Identifier: fmt.Sprintf("cl-%d", u)}}, false)
		require.NoError(t, errs[0])
		used := rs[0].Limit - rs[0].Remaining
		require.Equal(t, charged[u].Load(), used, "user %d: charged for denied batches (or admitted uncharged)", u)
		require.LessOrEqual(t, used, int64(12))
	}
}
