package engine_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/engine"
)

// emptyEndpointYAML has a rule for every endpoint, one on every path
// ("/**") and one on "/" alone.
const emptyEndpointYAML = `
rules:
  - name: every
    dimension: user
    algorithm: sliding_window_log
    rate: 10
    period: 1h
  - name: all-paths
    dimension: user
    endpoints: ["/**"]
    algorithm: sliding_window_log
    rate: 10
    period: 1h
  - name: root
    dimension: user
    endpoints: ["/"]
    algorithm: sliding_window_log
    rate: 10
    period: 1h
`

// TestEmptyEndpointMatchesOnlyRulesWithoutEndpoints: a check with no
// endpoint is decided by the rules of its dimension without endpoint
// patterns only (docs/service.md, Snapshot.Match), through every engine
// call: a rule on "/**" or "/" neither counts it nor is reported.
func TestEmptyEndpointMatchesOnlyRulesWithoutEndpoints(t *testing.T) {
	for name, store := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			e := newEngine(t, store(t), emptyEndpointYAML)
			c := engine.Check{Dimension: "user", Identifier: "ann", Cost: 1}
			only := func(what string, r engine.Result) {
				t.Helper()
				require.True(t, r.Allowed, what)
				require.Len(t, r.Decision.Results, 1, what)
				require.Equal(t, "every", r.Decision.Results[0].Policy, what)
			}
			only("check", mustCheck(t, e, c))
			r, err := e.Report(ctx, c)
			require.NoError(t, err)
			only("report", r)
			for _, aon := range []bool{false, true} {
				rs, errs := e.CheckBatch(ctx, []engine.Check{c}, aon)
				require.NoError(t, errs[0])
				only("batch", rs[0])
			}
			peek := mustCheck(t, e, engine.Check{Dimension: "user", Identifier: "ann"})
			only("peek", peek)
			require.EqualValues(t, 6, peek.Remaining, "every counted the four checks")
			for _, ep := range []string{"/", "/x"} {
				r := mustCheck(t, e, engine.Check{Dimension: "user", Identifier: "ann", Endpoint: ep})
				for _, p := range r.Decision.Results {
					if p.Policy != "every" {
						require.EqualValues(t, 10, p.Remaining, "%s counted a check without endpoint", p.Policy)
					}
				}
			}
			require.NoError(t, e.Reset(ctx, c))
			require.EqualValues(t, 10, mustCheck(t, e, engine.Check{Dimension: "user", Identifier: "ann"}).Remaining)
		})
	}
}

// TestIdempotencyIsBoundToTheCheck: a repeat is free only when it is the
// same check: the same key, dimension, identifier, endpoint, rule and cost.
// Checks that reach the same single rule by another endpoint, or by naming
// it, are counted.
func TestIdempotencyIsBoundToTheCheck(t *testing.T) {
	for name, store := range stores(t) {
		t.Run(name, func(t *testing.T) {
			e := newEngine(t, store(t), `
rules:
  - name: every
    dimension: user
    algorithm: sliding_window_log
    rate: 20
    period: 1h
`)
			c := engine.Check{Dimension: "user", Identifier: "ann", Endpoint: "/a", Cost: 1, IdempotencyKey: "K"}
			require.EqualValues(t, 19, mustCheck(t, e, c).Remaining)
			r := mustCheck(t, e, c)
			require.True(t, r.Decision.Repeat)
			require.EqualValues(t, 19, r.Remaining, "a repeat is free")
			left := int64(19)
			for _, other := range []engine.Check{
				{Dimension: "user", Identifier: "ann", Endpoint: "/b", Cost: 1, IdempotencyKey: "K"},
				{Dimension: "user", Identifier: "ann", Endpoint: "/a", Rule: "every", Cost: 1, IdempotencyKey: "K"},
				{Dimension: "user", Identifier: "ann", Endpoint: "", Cost: 1, IdempotencyKey: "K"},
				{Dimension: "user", Identifier: "ann", Endpoint: "/a", Cost: 2, IdempotencyKey: "K"},
				{Dimension: "user", Identifier: "ann", Endpoint: "/a", Cost: 1, IdempotencyKey: "K2"},
			} {
				r := mustCheck(t, e, other)
				left -= other.Cost
				require.False(t, r.Decision.Repeat, "%+v", other)
				require.EqualValues(t, left, r.Remaining, "%+v was not counted", other)
			}
		})
	}
}
