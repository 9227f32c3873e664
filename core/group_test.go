package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/keyfunc"
)

// testCheckGroup checks CheckGroup on a store for every algorithm: ops are
// decided all or nothing with their own costs, a peek counts nothing, a
// shadow's denial denies nothing, tiers pick their limit, and the state is
// the one requests and AllowN use.
func testCheckGroup(t *testing.T, newStore func(t *testing.T) core.Store) {
	ctx := context.Background()
	for _, a := range limitertest.Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			small := core.PerMinute(3).WithAlgorithm(a)
			big := core.PerMinute(10).WithAlgorithm(a)
			l, err := core.NewLimiter(newStore(t), []core.Policy{
				{Name: "small", Key: keyfunc.Const("x"), Limit: small, Tiers: map[string]core.Limit{"pro": big}},
				{Name: "big", Key: keyfunc.Const("x"), Limit: big},
				{Name: "trial", Key: keyfunc.Const("x"), Limit: core.PerMinute(1).WithAlgorithm(a), Shadow: true},
			}, core.WithTiering(core.Tiering{Key: keyfunc.Const("t"), Resolve: func(context.Context, string) (string, error) { return "", nil }}))
			require.NoError(t, err)

			d, err := l.CheckGroup(ctx, []core.GroupOp{{Policy: "small", Identity: "u", Cost: 2}, {Policy: "big", Identity: "u", Cost: 5}})
			require.NoError(t, err)
			require.True(t, d.Allowed)
			require.Len(t, d.Results, 2)
			require.Equal(t, "small", d.Results[0].Policy)
			require.EqualValues(t, 1, d.Results[0].Remaining)
			require.EqualValues(t, 5, d.Results[1].Remaining)
			require.Equal(t, 0, d.Binding, "the op with the fewest remaining binds")

			// small has 1 left: a group asking 2 of it is denied, and big
			// counts nothing.
			d, err = l.CheckGroup(ctx, []core.GroupOp{{Policy: "big", Identity: "u", Cost: 1}, {Policy: "small", Identity: "u", Cost: 2}})
			require.NoError(t, err)
			require.False(t, d.Allowed)
			require.Equal(t, 1, d.Binding)
			require.True(t, d.Results[0].Allowed)
			require.False(t, d.Results[1].Allowed)
			require.Positive(t, d.Results[1].RetryAfter)

			// Peeks count nothing.
			d, err = l.CheckGroup(ctx, []core.GroupOp{{Policy: "big", Identity: "u"}, {Policy: "small", Identity: "u"}})
			require.NoError(t, err)
			require.True(t, d.Allowed)
			require.EqualValues(t, 5, d.Results[0].Remaining, "the denied group or the peek counted")
			require.EqualValues(t, 1, d.Results[1].Remaining)

			// A spent counter's peek beside a take denies nothing: the take
			// is counted and the Decision says so (a refused Decision whose
			// take was counted would never be refunded). Peeks alone are
			// denied when one would not pass, as Peek.
			d, err = l.CheckGroup(ctx, []core.GroupOp{{Policy: "small", Identity: "s", Cost: 3}})
			require.NoError(t, err)
			require.True(t, d.Allowed)
			d, err = l.CheckGroup(ctx, []core.GroupOp{{Policy: "big", Identity: "s", Cost: 2}, {Policy: "small", Identity: "s"}})
			require.NoError(t, err)
			require.True(t, d.Allowed, "the take was counted")
			require.False(t, d.Results[1].Allowed, "the peek's answer: no unit left")
			require.EqualValues(t, 8, d.Results[0].Remaining)
			r, err := l.AllowN(ctx, "big", "s", 0)
			require.NoError(t, err)
			require.EqualValues(t, 8, r.Remaining, "the take counted")
			d, err = l.CheckGroup(ctx, []core.GroupOp{{Policy: "big", Identity: "s"}, {Policy: "small", Identity: "s"}})
			require.NoError(t, err)
			require.False(t, d.Allowed, "peeks only: one would not pass")

			// The same state as AllowN's.
			r, err = l.AllowN(ctx, "big", "u", 0)
			require.NoError(t, err)
			require.EqualValues(t, 5, r.Remaining)

			// A shadow's denial denies nothing.
			d, err = l.CheckGroup(ctx, []core.GroupOp{{Policy: "trial", Identity: "u", Cost: 2}, {Policy: "big", Identity: "u", Cost: 1}})
			require.NoError(t, err)
			require.True(t, d.Allowed)
			require.True(t, d.Results[0].ShadowDenied())
			require.Equal(t, 1, d.Binding, "a shadow does not bind")
			require.EqualValues(t, 4, d.Results[1].Remaining)

			// A tier picks its limit, on its own state.
			d, err = l.CheckGroup(ctx, []core.GroupOp{{Policy: "small", Identity: "p", Tier: "pro", Cost: 7}})
			require.NoError(t, err)
			require.True(t, d.Allowed)
			require.Equal(t, "pro", d.Results[0].Tier)
			require.Equal(t, big, d.Results[0].Limit)
			require.EqualValues(t, 3, d.Results[0].Remaining)
			d, err = l.CheckGroup(ctx, []core.GroupOp{{Policy: "small", Identity: "q", Tier: "gold", Cost: 1}})
			require.NoError(t, err)
			require.Equal(t, "", d.Results[0].Tier, "an unknown tier is the default limit")
			require.Equal(t, small, d.Results[0].Limit)

			// A Decision of one op owns its Results: a later call does not write into it.
			d1, err := l.CheckGroup(ctx, []core.GroupOp{{Policy: "big", Identity: "w", Cost: 1}})
			require.NoError(t, err)
			require.EqualValues(t, 9, d1.Results[0].Remaining)
			d3, err := l.CheckGroup(ctx, []core.GroupOp{{Policy: "big", Identity: "w", Cost: 1}})
			require.NoError(t, err)
			require.EqualValues(t, 8, d3.Results[0].Remaining)
			require.EqualValues(t, 9, d1.Results[0].Remaining, "a later call wrote into an earlier Decision")
		})
	}
}

func TestCheckGroupMemory(t *testing.T) {
	testCheckGroup(t, func(t *testing.T) core.Store { return memStore(t) })
}

func TestCheckGroupRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	testCheckGroup(t, func(t *testing.T) core.Store {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr})
		t.Cleanup(func() { c.Close() })
		require.NoError(t, c.FlushAll(context.Background()).Err())
		// The store's default 50 ms bound is for a served Redis; this one
		// shares a loaded test machine, and its first call loads the library.
		s, err := redisstore.New(c, redisstore.WithTimeout(5*time.Second))
		require.NoError(t, err)
		return s
	})
}

func TestCheckGroupErrors(t *testing.T) {
	ctx := context.Background()
	l, err := core.NewLimiter(memStore(t), []core.Policy{{Name: "a", Key: keyfunc.Const("x"), Limit: core.PerMinute(3)}})
	require.NoError(t, err)
	for name, tc := range map[string]struct {
		ops   []core.GroupOp
		is    error
		field string
		text  string
	}{
		"no identity":   {[]core.GroupOp{{Policy: "a"}}, core.ErrNoKey, "ops[0].Identity", `sluice: CheckGroup: ops[0].Identity: empty key (policy "a")`},
		"negative cost": {[]core.GroupOp{{Policy: "a", Identity: "u", Cost: 1}, {Policy: "a", Identity: "v", Cost: -1}}, core.ErrInvalidCost, "ops[1].Cost", `sluice: CheckGroup: ops[1].Cost: must not be negative, got -1 (policy "a")`},
		"unknown":       {[]core.GroupOp{{Policy: "b", Identity: "u"}}, nil, "ops[0].Policy", `sluice: CheckGroup: ops[0].Policy: no policy "b"`},
		"same key":      {[]core.GroupOp{{Policy: "a", Identity: "u", Cost: 1}, {Policy: "a", Identity: "u", Cost: 1}}, core.ErrInvalidCost, "ops[1].Key", ""},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := l.CheckGroup(ctx, tc.ops)
			require.Error(t, err)
			if tc.is != nil {
				require.ErrorIs(t, err, tc.is)
			}
			var fe *core.FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tc.field, fe.Field, "%v", err)
			if tc.text != "" {
				require.EqualError(t, err, tc.text)
			}
		})
	}
	// Nothing was counted by the failed groups.
	r, err := l.AllowN(ctx, "a", "u", 0)
	require.NoError(t, err)
	require.EqualValues(t, 3, r.Remaining)

	d, err := l.CheckGroup(ctx, nil)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Empty(t, d.Results)
}

// A group given the memory of its Results (GroupCall.Results) writes them
// there, and, on a context without cancellation, allocates nothing (a
// group of one op on the memory store); one given too little memory gets
// its own. On Redis too (allocations aside).
func TestCheckGroupResultsMemory(t *testing.T) {
	st, _ := frozen(t)
	testCheckGroupResultsMemory(t, st, true)
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	// The first call loads the library: more than the default timeout on
	// a loaded machine.
	rs, err := redisstore.New(c, redisstore.WithTimeout(5*time.Second))
	require.NoError(t, err)
	testCheckGroupResultsMemory(t, rs, false)
}

func testCheckGroupResultsMemory(t *testing.T, st core.Store, allocs bool) {
	ctx := context.Background()
	lim := core.Limit{Algorithm: core.FixedWindow, Rate: 1_000_000, Period: 24 * time.Hour}
	l, err := core.NewLimiter(st, []core.Policy{
		{Name: "a", Key: keyfunc.Const("x"), Limit: lim},
		{Name: "b", Key: keyfunc.Const("x"), Limit: lim},
	})
	require.NoError(t, err)
	ops := []core.GroupOp{{Policy: "a", Identity: "u", Cost: 1}, {Policy: "b", Identity: "u", Cost: 1}}
	buf := make([]core.PolicyResult, 3)
	d, err := l.CheckGroupWith(ctx, ops, core.GroupCall{Results: buf[1:]})
	require.NoError(t, err)
	require.Len(t, d.Results, 2)
	require.Same(t, &buf[1], &d.Results[0], "the Results are the memory given")
	require.Equal(t, "b", buf[2].Policy)
	require.EqualValues(t, 999_999, buf[2].Remaining)
	if allocs {
		require.Zero(t, testing.AllocsPerRun(100, func() {
			if _, err := l.CheckGroupWith(ctx, ops[:1], core.GroupCall{Results: buf}); err != nil {
				t.Fatal(err)
			}
		}))
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	d, err = l.CheckGroupWith(cctx, ops, core.GroupCall{Results: buf[:1:1]})
	require.NoError(t, err)
	require.NotSame(t, &buf[0], &d.Results[0], "too little memory: the Decision's own")
	require.Equal(t, "b", d.Results[1].Policy)
	require.EqualValues(t, 999_998, d.Results[1].Remaining)
}
