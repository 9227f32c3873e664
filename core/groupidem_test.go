package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/keyfunc"
)

// testGroupIdempotency checks CheckGroupWith's idempotency key on a store:
// a repeat of an admitted group (the same key, scope and ops) is free up
// to MaxRepeats times, then counted; a group that differs in its scope,
// an op's cost, identity or policy, or the order of its ops, is another
// call; a denied original and a group of peeks leave no record; a refunded
// original gives its record back.
func testGroupIdempotency(t *testing.T, s core.Store) {
	ctx := context.Background()
	name := "g" + time.Now().Format("150405.000000")
	l, err := core.NewLimiter(s, []core.Policy{
		{Name: name + "-a", Key: keyfunc.Const("x"), Limit: core.PerHour(10), Refund: core.RefundFailed},
		{Name: name + "-b", Key: keyfunc.Const("x"), Limit: core.PerHour(5)},
	}, idem)
	require.NoError(t, err)
	a, b := name+"-a", name+"-b"
	ops := func(id string, ca, cb int64) []core.GroupOp {
		return []core.GroupOp{{Policy: a, Identity: id, Cost: ca}, {Policy: b, Identity: id, Cost: cb}}
	}
	call := core.GroupCall{IdempotencyKey: "k1", Scope: []string{"/orders"}}
	group := func(ops []core.GroupOp, call core.GroupCall) core.Decision {
		t.Helper()
		d, err := l.CheckGroupWith(ctx, ops, call)
		require.NoError(t, err)
		return d
	}
	left := func(id string) (int64, int64) {
		t.Helper()
		d := group(ops(id, 0, 0), core.GroupCall{})
		return d.Results[0].Remaining, d.Results[1].Remaining
	}

	d := group(ops("u", 1, 2), call)
	require.True(t, d.Allowed)
	require.False(t, d.Repeat)
	for range 3 {
		d = group(ops("u", 1, 2), call)
		require.True(t, d.Allowed)
		require.True(t, d.Repeat, "a repeat within MaxRepeats is free")
		require.EqualValues(t, 9, d.Results[0].Remaining)
	}
	ra, rb := left("u")
	require.Equal(t, [2]int64{9, 3}, [2]int64{ra, rb}, "the repeats counted")
	d = group(ops("u", 1, 2), call)
	require.False(t, d.Repeat, "over MaxRepeats: counted")
	ra, rb = left("u")
	require.Equal(t, [2]int64{8, 1}, [2]int64{ra, rb})

	for what, other := range map[string]struct {
		ops  []core.GroupOp
		call core.GroupCall
	}{
		"scope":    {ops("scope", 1, 1), core.GroupCall{IdempotencyKey: "k1", Scope: []string{"/users"}}},
		"no scope": {ops("no scope", 1, 1), core.GroupCall{IdempotencyKey: "k1"}},
		"scopes":   {ops("scopes", 1, 1), core.GroupCall{IdempotencyKey: "k1", Scope: []string{"/orders", ""}}},
		"cost":     {ops("cost", 1, 2), call},
		"key":      {ops("key", 1, 1), core.GroupCall{IdempotencyKey: "k2", Scope: call.Scope}},
		"order":    {[]core.GroupOp{{Policy: b, Identity: "order", Cost: 1}, {Policy: a, Identity: "order", Cost: 1}}, call},
		"one op":   {ops("one op", 1, 1)[:1], call},
	} {
		first := group(ops(what, 1, 1), call)
		require.True(t, first.Allowed, what)
		d := group(other.ops, other.call)
		require.True(t, d.Allowed, what)
		require.False(t, d.Repeat, "%s: another call is no repeat", what)
	}

	// A denied original writes no record: its retry is decided again.
	group(ops("w", 0, 5), core.GroupCall{})
	d = group(ops("w", 1, 1), call)
	require.False(t, d.Allowed)
	d = group(ops("w", 1, 1), call)
	require.False(t, d.Allowed, "a retry of a denied original is not free")
	require.False(t, d.Repeat)

	// Peeks write no record: a take with the same key after them is counted.
	d = group(ops("p", 0, 0), call)
	require.True(t, d.Allowed)
	d = group(ops("p", 1, 1), call)
	require.False(t, d.Repeat)
	ra, rb = left("p")
	require.Equal(t, [2]int64{9, 4}, [2]int64{ra, rb})

	// A refunded original gives its record back: the retry is counted.
	d = group(ops("r", 1, 1), call)
	require.True(t, d.Allowed)
	require.NoError(t, l.Refund(ctx, &d, 500))
	d = group(ops("r", 1, 1), call)
	require.False(t, d.Repeat, "the refunded original's record was kept")
	ra, rb = left("r")
	require.Equal(t, [2]int64{9, 3}, [2]int64{ra, rb}, "a's refund and the retry")
}

func TestGroupIdempotencyMemory(t *testing.T) {
	testGroupIdempotency(t, memStore(t))
}

func TestGroupIdempotencyRedis(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		testGroupIdempotency(t, redisStore(t, redistest.StartServer(t).Client(t)))
	})
	t.Run("cluster", func(t *testing.T) {
		testGroupIdempotency(t, redisStore(t, shared.Cluster(t).Client(t)))
	})
}

// A group never repeats a request with the same idempotency key.
func TestGroupIdempotencyIsNotARequests(t *testing.T) {
	ctx := context.Background()
	l, err := core.NewLimiter(memStore(t), []core.Policy{
		{Name: "per-user", Key: keyfunc.Header("U"), Limit: core.PerHour(10)},
	}, idem)
	require.NoError(t, err)
	d, err := l.Check(ctx, idemReq("u", "k", "POST", "/pay"))
	require.NoError(t, err)
	require.True(t, d.Allowed)
	g, err := l.CheckGroupWith(ctx, []core.GroupOp{{Policy: "per-user", Identity: "u", Cost: 1}}, core.GroupCall{IdempotencyKey: "k"})
	require.NoError(t, err)
	require.False(t, g.Repeat)
	require.EqualValues(t, 8, g.Results[0].Remaining)
}
