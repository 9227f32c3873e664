package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rules"
)

func memStore(t testing.TB) core.Store {
	t.Helper()
	s, err := memorystore.New()
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// newEngine returns an engine on store under the rules file yaml.
func newEngine(t testing.TB, store core.Store, yaml string, opts ...engine.Option) *engine.Engine {
	t.Helper()
	e, err := engine.New(context.Background(), store, rules.NewBytes("rules.yaml", []byte(yaml)), opts...)
	require.NoError(t, err)
	return e
}

const ordersYAML = `
rules:
  - name: orders-per-user
    dimension: user
    endpoints: [/api/v1/orders, /api/v1/orders/*]
    algorithm: fixed_window
    rate: 3
    period: 1m
  - name: api-per-user
    dimension: user
    endpoints: [/api/**]
    algorithm: sliding_window_log
    rate: 5
    period: 1m
  - name: per-ip
    dimension: ip
    rate: 2
    period: 1m
`

func TestCheckNative(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, memStore(t), ordersYAML)
	check := func(c engine.Check) engine.Result {
		t.Helper()
		r, err := e.Check(ctx, c)
		require.NoError(t, err)
		return r
	}
	c := engine.Check{Dimension: "user", Identifier: "alice", Endpoint: "/api/v1/orders", Cost: 1}
	r := check(c)
	require.True(t, r.Allowed)
	require.Equal(t, "orders-per-user", r.Rule, "the rule closest to its limit binds")
	require.EqualValues(t, 3, r.Limit)
	require.EqualValues(t, 2, r.Remaining)
	require.EqualValues(t, 1, r.Used)
	require.Len(t, r.Decision.Results, 2)
	require.WithinDuration(t, time.Now().Add(time.Minute), r.ResetAt, time.Minute)

	// Another endpoint under /api counts only api-per-user.
	r = check(engine.Check{Dimension: "user", Identifier: "alice", Endpoint: "/api/v1/users", Cost: 1})
	require.True(t, r.Allowed)
	require.Equal(t, "api-per-user", r.Rule)
	require.EqualValues(t, 3, r.Remaining)

	// Peeks count nothing.
	for range 3 {
		r = check(engine.Check{Dimension: "user", Identifier: "alice", Endpoint: "/api/v1/orders/7"})
		require.True(t, r.Allowed)
		require.EqualValues(t, 2, r.Remaining)
	}
	// Cost 3 exceeds orders-per-user's 2 left: denied, and api-per-user
	// consumes nothing.
	r = check(engine.Check{Dimension: "user", Identifier: "alice", Endpoint: "/api/v1/orders", Cost: 3})
	require.False(t, r.Allowed)
	require.Equal(t, "orders-per-user", r.Rule)
	require.Equal(t, core.Throttled, r.State)
	require.Positive(t, r.RetryAfter)
	r = check(engine.Check{Dimension: "user", Identifier: "alice", Endpoint: "/api/v1/users"})
	require.EqualValues(t, 3, r.Remaining, "a denied check consumed from another rule")

	// No rule of the dimension or the endpoint: allowed, nothing counted.
	for _, c := range []engine.Check{
		{Dimension: "api_key", Identifier: "k", Endpoint: "/api/v1/orders", Cost: 1},
		{Dimension: "user", Identifier: "alice", Endpoint: "/health", Cost: 1},
	} {
		r = check(c)
		require.True(t, r.Allowed)
		require.Empty(t, r.Rule)
		require.Empty(t, r.Decision.Results)
	}
	// A rule for every endpoint matches an empty endpoint.
	r = check(engine.Check{Dimension: "ip", Identifier: "192.0.2.1", Cost: 2})
	require.True(t, r.Allowed)
	require.Equal(t, "per-ip", r.Rule)
	require.EqualValues(t, 0, r.Remaining)
	require.Equal(t, core.Warning, r.State)
	r = check(engine.Check{Dimension: "ip", Identifier: "192.0.2.1", Cost: 1})
	require.False(t, r.Allowed)

	// A check naming a rule is decided by that rule only, whatever its
	// endpoint.
	r = check(engine.Check{Dimension: "user", Identifier: "bob", Rule: "orders-per-user", Cost: 1})
	require.True(t, r.Allowed)
	require.Equal(t, "orders-per-user", r.Rule)
	require.Len(t, r.Decision.Results, 1)
	r = check(engine.Check{Dimension: "user", Identifier: "bob", Endpoint: "/api/v1/orders"})
	require.EqualValues(t, 2, r.Remaining, "the state is the rule's, shared with endpoint checks")
}

func TestCheckInvalid(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, memStore(t), ordersYAML+`
  - name: envoy-like
    domain: edge
    dimension: user
    rate: 1
    period: 1s
`, engine.WithMaxClientSkew(time.Hour))
	long := string(make([]byte, 2000))
	for _, tc := range []struct {
		c     engine.Check
		field string
	}{
		{engine.Check{Identifier: "a"}, "dimension"},
		{engine.Check{Dimension: "user"}, "identifier"},
		{engine.Check{Dimension: "user", Identifier: "a", Cost: -1}, "cost"},
		{engine.Check{Dimension: "user", Identifier: long}, "identifier"},
		{engine.Check{Dimension: "user", Identifier: "a", Rule: "nope"}, "rule"},
		{engine.Check{Dimension: "ip", Identifier: "a", Rule: "orders-per-user"}, "rule"},
		{engine.Check{Dimension: "user", Identifier: "a", ClientTime: time.Now().Add(2 * time.Hour)}, "client_time"},
		{engine.Check{Dimension: "user", Identifier: "a", ClientTime: time.Now().Add(-2 * time.Hour)}, "client_time"},
	} {
		_, err := e.Check(ctx, tc.c)
		require.ErrorIs(t, err, engine.ErrInvalid, "%+v", tc.c)
		var fe *core.FieldError
		require.True(t, errors.As(err, &fe))
		require.Equal(t, tc.field, fe.Field, err.Error())
	}
	// A client time within the bound is only a hint.
	r, err := e.Check(ctx, engine.Check{Dimension: "user", Identifier: "a", Endpoint: "/api/v1/orders", Cost: 1, ClientTime: time.Now().Add(-30 * time.Minute)})
	require.NoError(t, err)
	require.True(t, r.Allowed)
	// Invalid checks counted nothing.
	require.EqualValues(t, 2, r.Remaining)
	// A rule with a domain is not a check's, unless named.
	r, err = e.Check(ctx, engine.Check{Dimension: "user", Identifier: "z", Cost: 1})
	require.NoError(t, err)
	require.Empty(t, r.Rule)
	r, err = e.Check(ctx, engine.Check{Dimension: "user", Identifier: "z", Rule: "envoy-like", Cost: 1})
	require.NoError(t, err)
	require.Equal(t, "envoy-like", r.Rule)
}

func TestNoRules(t *testing.T) {
	ctx := context.Background()
	empty, err := rules.New("empty", nil, nil) // a database source may have no rules yet
	require.NoError(t, err)
	e, err := engine.New(ctx, memStore(t), newSource(empty))
	require.NoError(t, err)
	c := engine.Check{Dimension: "user", Identifier: "u", Cost: 1}
	r := mustCheck(t, e, c)
	require.True(t, r.Allowed)
	require.Empty(t, r.Rule)
	rs, errs := e.CheckBatch(ctx, []engine.Check{c, c}, true)
	require.NoError(t, errs[0])
	require.True(t, rs[1].Allowed)
	r, err = e.Report(ctx, c)
	require.NoError(t, err)
	require.True(t, r.Allowed)
	require.NoError(t, e.Reset(ctx, c))
	d, err := e.Descriptors(ctx, "any", []engine.Descriptor{{Entries: []rules.Entry{{Key: "k"}}, Cost: 1}})
	require.NoError(t, err)
	require.True(t, d.Allowed)
	_, err = engine.New(ctx, nil, rules.NewBytes("r", nil))
	require.Error(t, err)
	_, err = engine.New(ctx, memStore(t), rules.NewBytes("r.yaml", []byte("rules: [{name: x}]\n")))
	require.Error(t, err, "a source that cannot load")
}
