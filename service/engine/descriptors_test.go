package engine_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rules"
)

// envoyRules builds the Envoy rules of domain "edge" directly (as an Envoy
// file would give them).
func envoyRules(t *testing.T, alg core.Algorithm) *rules.Snapshot {
	t.Helper()
	lim := func(n int64) core.Limit { return core.Limit{Algorithm: alg, Rate: n, Period: 3600e9} }
	node := func(name string, levels ...rules.EnvoyLevel) *rules.EnvoyNode {
		return &rules.EnvoyNode{Path: levels, Name: name}
	}
	s, err := rules.New("test", []*rules.Rule{
		{ID: "per-ip", Domain: "edge", Limit: lim(3), Envoy: node("", rules.EnvoyLevel{Key: "remote_address"})},
		{ID: "path-a", Domain: "edge", Limit: lim(2), Envoy: node("", rules.EnvoyLevel{Key: "path", Value: "/a"})},
		{ID: "free", Domain: "edge", Unlimited: true, Envoy: node("", rules.EnvoyLevel{Key: "path", Value: "/free"})},
		{ID: "vip", Domain: "edge", Limit: lim(100), Replaces: []string{"per-ip"}, Envoy: node("vip", rules.EnvoyLevel{Key: "user", Value: "vip"})},
		{ID: "trial", Domain: "edge", Limit: lim(1), Shadow: true, Envoy: node("", rules.EnvoyLevel{Key: "trial"})},
		{ID: "nested", Domain: "edge", Limit: lim(4), Envoy: node("", rules.EnvoyLevel{Key: "remote_address"}, rules.EnvoyLevel{Key: "path", Value: "/b"})},
	}, nil)
	require.NoError(t, err)
	return s
}

func ip(v string) engine.Descriptor {
	return engine.Descriptor{Entries: []rules.Entry{{Key: "remote_address", Value: v}}, Cost: 1}
}

func path(v string) engine.Descriptor {
	return engine.Descriptor{Entries: []rules.Entry{{Key: "path", Value: v}}, Cost: 1}
}

func TestDescriptors(t *testing.T) {
	ctx := context.Background()
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			for _, a := range []core.Algorithm{core.FixedWindow, core.TokenBucket, core.SlidingWindowCounter} {
				t.Run(a.String(), func(t *testing.T) {
					e, err := engine.New(ctx, newStore(t), newSource(envoyRules(t, a)))
					require.NoError(t, err)
					do := func(ds ...engine.Descriptor) engine.DescriptorsResult {
						t.Helper()
						r, err := e.Descriptors(ctx, "edge", ds)
						require.NoError(t, err)
						require.Len(t, r.Statuses, len(ds))
						return r
					}

					// Per-descriptor cost, statuses in order, no rule = OK.
					x := ip("10.0.0.1")
					x.Cost = 2
					r := do(x, path("/a"), path("/nowhere"))
					require.True(t, r.Allowed)
					require.Equal(t, "per-ip", r.Statuses[0].Rule.ID)
					require.EqualValues(t, 1, r.Statuses[0].Result.Remaining)
					require.EqualValues(t, 1, r.Statuses[1].Result.Remaining)
					require.Nil(t, r.Statuses[2].Rule)
					require.Len(t, r.Decision.Results, 2)

					// All or nothing: path-a has 1 left, 2 asked: nothing
					// counted on per-ip.
					y := path("/a")
					y.Cost = 2
					r = do(ip("10.0.0.1"), y)
					require.False(t, r.Allowed)
					require.True(t, r.Statuses[0].Result.Allowed)
					require.False(t, r.Statuses[1].Result.Allowed)
					require.Positive(t, r.Statuses[1].Result.RetryAfter)
					// Peeks (cost 0) count nothing.
					p := ip("10.0.0.1")
					p.Cost = 0
					r = do(p, p)
					require.True(t, r.Allowed)
					require.EqualValues(t, 1, r.Statuses[0].Result.Remaining, "the denied request counted")
					require.EqualValues(t, 1, r.Statuses[1].Result.Remaining)

					// Two descriptors of one counter take their sum; each
					// says what is left after it, in request order.
					r = do(ip("10.0.0.2"), ip("10.0.0.2"))
					require.True(t, r.Allowed)
					require.EqualValues(t, 2, r.Statuses[0].Result.Remaining)
					require.EqualValues(t, 1, r.Statuses[1].Result.Remaining)
					r = do(ip("10.0.0.2"), ip("10.0.0.2"))
					require.False(t, r.Allowed, "2 asked, 1 left")
					require.True(t, r.Statuses[0].Result.Allowed, "the first fits")
					require.EqualValues(t, 1, r.Statuses[0].Result.Remaining, "nothing was taken")
					require.False(t, r.Statuses[1].Result.Allowed)
					require.Zero(t, r.Statuses[1].Result.Remaining)

					// Unlimited: OK, nothing counted. Replaces: vip cancels
					// per-ip. Shadow: its denial does not deny.
					r = do(path("/free"), ip("10.0.0.2"), engine.Descriptor{Entries: []rules.Entry{{Key: "user", Value: "vip"}}, Cost: 1})
					require.True(t, r.Allowed)
					require.True(t, r.Statuses[0].Unlimited)
					require.Equal(t, "free", r.Statuses[0].Rule.ID)
					require.Nil(t, r.Statuses[1].Rule, "a replaced rule applied")
					require.EqualValues(t, 99, r.Statuses[2].Result.Remaining)
					tr := engine.Descriptor{Entries: []rules.Entry{{Key: "trial", Value: "t"}}, Cost: 5}
					r = do(tr, path("/a"))
					require.True(t, r.Allowed)
					require.True(t, r.Statuses[0].Result.ShadowDenied())
					require.EqualValues(t, 0, r.Statuses[1].Result.Remaining)

					// Depth must equal: two entries reach nested, not per-ip.
					r = do(engine.Descriptor{Entries: []rules.Entry{{Key: "remote_address", Value: "10.0.0.1"}, {Key: "path", Value: "/b"}}, Cost: 1})
					require.Equal(t, "nested", r.Statuses[0].Rule.ID)
					require.EqualValues(t, 3, r.Statuses[0].Result.Remaining)

					// Negative hits give back.
					n := ip("10.0.0.3")
					n.Cost = 3
					require.EqualValues(t, 0, do(n).Statuses[0].Result.Remaining)
					n.Cost, n.Negative = 2, true
					r = do(n)
					require.True(t, r.Allowed)
					require.EqualValues(t, 2, r.Statuses[0].Result.Remaining, "negative hits gave nothing back")
					n.Cost = 10
					require.EqualValues(t, 3, do(n).Statuses[0].Result.Remaining, "a refund went past the fresh state")
				})
			}
		})
	}
}

func TestDescriptorsInvalid(t *testing.T) {
	ctx := context.Background()
	e, err := engine.New(ctx, memStore(t), newSource(envoyRules(t, core.FixedWindow)))
	require.NoError(t, err)
	for _, tc := range []struct {
		domain string
		ds     []engine.Descriptor
		field  string
	}{
		{"", []engine.Descriptor{ip("a")}, "domain"},
		{"edge", nil, "descriptors"},
		{"edge", []engine.Descriptor{{Entries: []rules.Entry{{Key: "k"}}, Cost: -1}}, "descriptors[0].hits_addend"},
	} {
		_, err := e.Descriptors(ctx, tc.domain, tc.ds)
		var fe *core.FieldError
		require.True(t, errors.As(err, &fe), "%v", err)
		require.Equal(t, tc.field, fe.Field)
	}
	// An unknown domain: OK, nothing limits.
	r, err := e.Descriptors(ctx, "other", []engine.Descriptor{ip("a")})
	require.NoError(t, err)
	require.True(t, r.Allowed)
	require.Nil(t, r.Statuses[0].Rule)
	// A descriptor without entries, or with an empty key, matches no rule
	// (as envoyproxy/ratelimit answers it), and the others are decided.
	r, err = e.Descriptors(ctx, "edge", []engine.Descriptor{{Cost: 1}, ip("b"), {Entries: []rules.Entry{{Value: "v"}}, Cost: 1}, {Entries: []rules.Entry{{}}}})
	require.NoError(t, err)
	require.True(t, r.Allowed)
	require.Nil(t, r.Statuses[0].Rule)
	require.Equal(t, "per-ip", r.Statuses[1].Rule.ID)
	require.EqualValues(t, 2, r.Statuses[1].Result.Remaining)
	require.Nil(t, r.Statuses[2].Rule)
	require.Nil(t, r.Statuses[3].Rule)
}

// TestDescriptorsEnvoyFile decides descriptors under a rules file in
// envoyproxy/ratelimit's format.
func TestDescriptorsEnvoyFile(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, memStore(t), `
domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      name: per-ip
      unit: minute
      requests_per_unit: 2
  - key: path
    value: /free
    rate_limit:
      unlimited: true
  - key: user
    value: vip
    rate_limit:
      unit: hour
      requests_per_unit: 100
      replaces:
        - name: per-ip
  - key: path
    value: /api*
    shadow_mode: true
    rate_limit:
      unit: second
      requests_per_unit: 1
`)
	do := func(ds ...engine.Descriptor) engine.DescriptorsResult {
		t.Helper()
		r, err := e.Descriptors(ctx, "edge", ds)
		require.NoError(t, err)
		return r
	}
	r := do(ip("192.0.2.1"), ip("192.0.2.1"))
	require.True(t, r.Allowed)
	require.Equal(t, "per-ip", r.Statuses[0].Rule.ID)
	require.Equal(t, core.FixedWindow, r.Statuses[0].Result.Limit.Algorithm)
	require.EqualValues(t, 0, r.Statuses[1].Result.Remaining)
	r = do(ip("192.0.2.1"), path("/free"))
	require.False(t, r.Allowed)
	require.True(t, r.Statuses[1].Unlimited)
	vip := engine.Descriptor{Entries: []rules.Entry{{Key: "user", Value: "vip"}}, Cost: 1}
	r = do(ip("192.0.2.1"), vip)
	require.True(t, r.Allowed, "vip replaces per-ip")
	require.Nil(t, r.Statuses[0].Rule)
	r = do(path("/api/x"), path("/api/x")) // one counter per value: 2 of 1
	require.True(t, r.Allowed, "a shadow rule denied")
	require.True(t, r.Statuses[1].Result.ShadowDenied())
	require.True(t, r.Statuses[1].Result.Shadow)
}
