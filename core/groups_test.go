package core_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/keyfunc"
)

// groupsLimiter is a Limiter of three policies (one tiered, one shadow) on
// st.
func groupsLimiter(t *testing.T, st core.Store) *core.Limiter {
	t.Helper()
	l, err := core.NewLimiter(st, []core.Policy{
		{Name: "small", Key: keyfunc.Const("x"), Limit: core.PerMinute(3), Tiers: map[string]core.Limit{"pro": core.PerMinute(6)}},
		{Name: "big", Key: keyfunc.Const("x"), Limit: core.PerMinute(10).WithAlgorithm(core.SlidingWindowCounter)},
		{Name: "trial", Key: keyfunc.Const("x"), Limit: core.PerMinute(2).WithAlgorithm(core.GCRA), Shadow: true},
	}, core.WithTiering(core.Tiering{Key: keyfunc.Const("x"), Resolve: func(context.Context, string) (string, error) { return "", nil }}))
	require.NoError(t, err)
	return l
}

// randomGroup is a random group of CheckGroups on identities named after
// id: one to three ops of any cost, a tier, now and then an invalid one
// (an unknown policy, no identity, a negative cost, two ops of one key) or
// none.
func randomGroup(rng *rand.Rand, id string) []core.GroupOp {
	policies := []string{"small", "big", "trial"}
	var ops []core.GroupOp
	for j := range 1 + rng.IntN(3) {
		op := core.GroupOp{Policy: policies[(j+rng.IntN(3))%3], Identity: id + "-" + strconv.Itoa(rng.IntN(2)), Cost: int64(rng.IntN(4))}
		if rng.IntN(4) == 0 {
			op.Tier = "pro"
		}
		ops = append(ops, op)
	}
	switch rng.IntN(12) {
	case 0:
		ops[0].Policy = "unknown"
	case 1:
		ops[0].Identity = ""
	case 2:
		ops[0].Cost = -1
	case 3:
		ops = append(ops, ops[0])
	case 4:
		ops = nil
	}
	return ops
}

// TestCheckGroupsAsCheckGroup: CheckGroups decides each group as
// CheckGroup decides it (the same Decision, or an error where it errs),
// on the memory store, on the Redis store and through the guard over it,
// over rounds of random groups on distinct identities, with and without
// memory for their Results; twin identities decided by CheckGroup live the
// same histories.
func TestCheckGroupsAsCheckGroup(t *testing.T) {
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	rs, err := redisstore.New(c, redisstore.WithTimeout(10*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { rs.Close() })
	g, err := guard.New(rs, guard.WithTimeout(10*time.Second))
	require.NoError(t, err)
	ms, err := memorystore.New()
	require.NoError(t, err)
	t.Cleanup(func() { ms.Close() })
	for name, st := range map[string]core.Store{"memory": ms, "redis": rs, "guard": g} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			l := groupsLimiter(t, st)
			rng := rand.New(rand.NewPCG(5, 6))
			prefix := fmt.Sprintf("cg-%s-%d", name, time.Now().UnixNano())
			for round := range 5 {
				groups := make([]core.Group, 30)
				given := make([][]core.PolicyResult, len(groups))
				twins := make([][]core.GroupOp, len(groups))
				for i := range groups {
					ops := randomGroup(rng, fmt.Sprintf("%s-%d", prefix, i))
					twins[i] = make([]core.GroupOp, len(ops))
					for j, op := range ops {
						if op.Identity != "" {
							op.Identity += "-twin"
						}
						twins[i][j] = op
					}
					groups[i].Ops = ops
					if rng.IntN(2) == 0 {
						groups[i].Results = make([]core.PolicyResult, max(len(ops)+rng.IntN(2)-rng.IntN(2), 0))
						given[i] = groups[i].Results
					}
				}
				l.CheckGroups(ctx, groups)
				for i := range groups {
					want, werr := l.CheckGroup(ctx, twins[i])
					where := fmt.Sprintf("round %d group %d %+v", round, i, groups[i].Ops)
					got := groups[i]
					if werr != nil {
						require.Error(t, got.Err, where)
						require.Equal(t, strings.ReplaceAll(werr.Error(), "-twin", ""), got.Err.Error(), where)
						continue
					}
					require.NoError(t, got.Err, where)
					d := got.Decision()
					require.Equal(t, want.Allowed, d.Allowed, where)
					require.Equal(t, want.Binding, d.Binding, where)
					require.Len(t, d.Results, len(want.Results), where)
					for j := range want.Results {
						w, r := want.Results[j], d.Results[j]
						require.Equal(t, w.Policy, r.Policy, where)
						require.Equal(t, w.Limit, r.Limit, where)
						require.Equal(t, w.Tier, r.Tier, where)
						require.Equal(t, w.Allowed, r.Allowed, where)
						require.Equal(t, w.Remaining, r.Remaining, where)
						require.Equal(t, w.State, r.State, where)
						require.Equal(t, w.Source, r.Source, where)
					}
					if cap(given[i]) >= len(groups[i].Ops) && len(d.Results) > 0 {
						require.Same(t, &given[i][0], &d.Results[0], "%s: the memory given", where)
					}
				}
			}
		})
	}
}

// TestCheckGroupsOneRoundTrip: on Redis (standalone), the one-op groups
// of a CheckGroups go in one call of the server, one decideMany FCALL,
// where as many CheckGroup calls from one goroutine are one FCALL each.
func TestCheckGroupsOneRoundTrip(t *testing.T) {
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	rs, err := redisstore.New(c, redisstore.WithTimeout(10*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { rs.Close() })
	ctx := context.Background()
	l := groupsLimiter(t, rs)
	groups := make([]core.Group, 100)
	for i := range groups {
		groups[i].Ops = []core.GroupOp{{Policy: "big", Identity: "rt-" + strconv.Itoa(i), Cost: 1}}
	}
	_, err = l.CheckGroup(ctx, groups[0].Ops) // loads the code
	require.NoError(t, err)
	before := redistest.CommandCalls(t, c, "fcall")
	l.CheckGroups(ctx, groups)
	require.Equal(t, before+1, redistest.CommandCalls(t, c, "fcall"), "one FCALL for 100 groups")
	for i := range groups {
		require.NoError(t, groups[i].Err)
		require.True(t, groups[i].Allowed)
		require.EqualValues(t, 10-1-btoi(i == 0), groups[i].Results[0].Remaining)
	}
}

func btoi(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
