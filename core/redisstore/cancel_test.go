package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

// twoSlots returns two keys of policy p whose identities live in different
// slots of s's Cluster (names from prefix and i).
func twoSlots(t *testing.T, s *redisstore.Store, prefix string, i int) (core.Key, core.Key) {
	t.Helper()
	a := core.Key{Identity: fmt.Sprintf("%s-a%d", prefix, i), Policy: "p"}
	for j := 0; ; j++ {
		b := core.Key{Identity: fmt.Sprintf("%s-b%d-%d", prefix, i, j), Policy: "p"}
		if redistest.Slot(s.Key(a, core.FixedWindow)) != redistest.Slot(s.Key(b, core.FixedWindow)) {
			return a, b
		}
	}
}

// A group over identities in different Cluster slots is several scripts;
// a caller cancelling at any moment must get all of them run or none, never
// one identity charged and the other not (it did about 1 time in 20).
func TestClusterGroupCancelledNeverHalf(t *testing.T) {
	cluster := shared.Cluster(t)
	s := newStore(t, cluster.Client(t), redisstore.WithTimeout(5*time.Second))
	lim := core.Limit{Algorithm: core.FixedWindow, Rate: 10, Period: time.Hour}
	r := rand.New(rand.NewPCG(5, 5))
	prefix := limitertest.Key(t).Identity // keys of this run's own on the shared cluster
	for i := range 200 {
		a, b := twoSlots(t, s, prefix, i)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(time.Duration(r.IntN(800))*time.Microsecond, cancel)
		out := make([]core.Result, 2)
		err := s.Take(ctx, []core.Op{{Key: a, Limit: lim, Cost: 2}, {Key: b, Limit: lim, Cost: 2}}, out)
		cancel()
		// A call abandoned by its caller may still be running: the two
		// identities agree once it has ended (peeks change nothing, and
		// nothing else touches them), or one was charged for good.
		require.Eventually(t, func() bool {
			ra, errA := limitertest.TakeOne(context.Background(), s, a, lim, 0)
			rb, errB := limitertest.TakeOne(context.Background(), s, b, lim, 0)
			return errA == nil && errB == nil && ra.Remaining == rb.Remaining
		}, 2*time.Second, time.Millisecond, "group %d (err %v): one identity charged, not the other", i, err)
	}
}

// When one node of a Cluster group fails, the Take fails, and the
// admissions the other nodes made are given back.
func TestClusterGroupNodeDownGivesBack(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	s := newStore(t, cluster.Client(t), redisstore.WithTimeout(2*time.Second))
	lim := core.Limit{Algorithm: core.FixedWindow, Rate: 10, Period: time.Hour}
	a, b := twoSlots(t, s, "down", 0)
	for j := 1; cluster.NodeForKey(s.Key(a, core.FixedWindow)) == cluster.NodeForKey(s.Key(b, core.FixedWindow)); j++ {
		a, b = twoSlots(t, s, "down", j)
	}
	out := make([]core.Result, 2)
	require.NoError(t, s.Take(context.Background(), []core.Op{{Key: a, Limit: lim, Cost: 1}, {Key: b, Limit: lim, Cost: 1}}, out))
	require.True(t, out[0].Allowed)
	cluster.NodeForKey(s.Key(b, core.FixedWindow)).Kill()
	err := s.Take(context.Background(), []core.Op{{Key: a, Limit: lim, Cost: 3}, {Key: b, Limit: lim, Cost: 3}}, out)
	require.Error(t, err)
	ra, err := limitertest.TakeOne(context.Background(), s, a, lim, 0)
	require.NoError(t, err)
	require.Equal(t, int64(9), ra.Remaining, "a failed group left its other identity charged")
}

// On Redis TIME (no clock option), a group whose identities live on three
// masters is decided at one instant, read once: every op of it reports the
// same At (a fresh key is decided at the instant itself), and a denied
// group's admissions are taken back exactly, the other keys left fresh.
func TestClusterGroupDecidedAtOneInstant(t *testing.T) {
	cluster := shared.Cluster(t)
	s := newStore(t, cluster.Client(t), redisstore.WithTimeout(5*time.Second))
	lim := core.Limit{Algorithm: core.SlidingWindowLog, Rate: 2, Period: time.Hour}
	ctx := context.Background()
	for i := range 20 {
		var ops []core.Op
		nodes := map[*redistest.Server]bool{}
		for j := 0; len(ops) < 3; j++ {
			k := core.Key{Identity: fmt.Sprintf("one-%d-%d-%d", time.Now().UnixNano(), i, j), Policy: "p"}
			if n := cluster.NodeForKey(s.Key(k, lim.Algorithm)); !nodes[n] {
				nodes[n] = true
				ops = append(ops, core.Op{Key: k, Limit: lim, Cost: 1})
			}
		}
		out := make([]core.Result, len(ops))
		require.NoError(t, s.Take(ctx, ops, out))
		for j := range out {
			require.True(t, out[j].Allowed)
			require.Equal(t, out[0].At, out[j].At, "group %d: op %d decided at another instant: %+v", i, j, out)
		}
		ops[2].Cost = 2 // denied: the other two admissions are taken back
		require.NoError(t, s.Take(ctx, ops, out))
		require.False(t, out[2].Allowed)
		for j := range 2 {
			r, err := limitertest.TakeOne(ctx, s, ops[j].Key, lim, 0)
			require.NoError(t, err)
			require.Equal(t, int64(1), r.Remaining, "group %d op %d: as before the denied group: %+v", i, j, r)
		}
	}
}
