package engine_test

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rules"
)

// TestAttackBatchCostOverflow: checks of one counter in an all-or-nothing
// batch take their summed cost; costs that wrap int64 when summed must be
// refused as invalid input, never decided as the small (or zero, or
// negative) cost the wrapped sum is.
func TestAttackBatchCostOverflow(t *testing.T) {
	ctx := context.Background()
	snap := parse(t, `
rules:
  - name: per-user
    dimension: user
    algorithm: fixed_window
    rate: 10
    period: 1h
`)
	for _, costs := range [][]int64{
		{math.MaxInt64, math.MaxInt64, 3},    // wraps to 1
		{1 << 62, 1 << 62, 1 << 62, 1 << 62}, // wraps to 0
		{math.MaxInt64, math.MaxInt64},       // wraps to -2
		{math.MaxInt64, 1},                   // wraps to MinInt64
	} {
		e, err := engine.New(ctx, memStore(t), newSource(snap))
		require.NoError(t, err)
		cs := make([]engine.Check, len(costs))
		for i, c := range costs {
			cs[i] = engine.Check{Dimension: "user", Identifier: "mallory", Cost: c}
		}
		res, errs := e.CheckBatch(ctx, cs, true)
		for i := range cs {
			if errs[i] == nil {
				require.False(t, res[i].Allowed, "costs %v: check %d of an overflowing batch admitted", costs, i)
				continue
			}
			require.ErrorIs(t, errs[i], engine.ErrInvalid, "costs %v: check %d: a wrapped sum is the caller's input, not a store failure", costs, i)
			var fe *core.FieldError
			require.True(t, errors.As(errs[i], &fe))
		}
		// Nothing was taken: the whole limit is left.
		require.Equal(t, int64(9), mustCheck(t, e, engine.Check{Dimension: "user", Identifier: "mallory", Cost: 1}).Remaining, "costs %v", costs)
	}
}

// TestAttackDescriptorCostOverflow: two descriptors reaching one counter
// take their summed hits; a sum that wraps int64 must not be decided as
// the wrapped value.
func TestAttackDescriptorCostOverflow(t *testing.T) {
	ctx := context.Background()
	snap, err := rules.Parse("envoy.yaml", []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: hour
      requests_per_unit: 10
`))
	require.NoError(t, err)
	for _, costs := range [][]int64{
		{math.MaxInt64, math.MaxInt64, 3},
		{1 << 62, 1 << 62, 1 << 62, 1 << 62},
		{math.MaxInt64, math.MaxInt64},
		{math.MaxInt64, 1},
	} {
		e, err := engine.New(ctx, memStore(t), newSource(snap))
		require.NoError(t, err)
		ds := make([]engine.Descriptor, len(costs))
		for i, c := range costs {
			ds[i] = engine.Descriptor{Entries: []rules.Entry{{Key: "remote_address", Value: "10.0.0.1"}}, Cost: c}
		}
		res, err := e.Descriptors(ctx, "edge", ds)
		if err == nil {
			require.False(t, res.Allowed, "costs %v: an overflowing request admitted", costs)
		} else {
			require.ErrorIs(t, err, engine.ErrInvalid, "costs %v: a wrapped sum is the caller's input, not a store failure", costs)
		}
		one, err := e.Descriptors(ctx, "edge", []engine.Descriptor{{Entries: []rules.Entry{{Key: "remote_address", Value: "10.0.0.1"}}, Cost: 1}})
		require.NoError(t, err)
		require.True(t, one.Allowed)
		require.Equal(t, int64(9), one.Statuses[0].Result.Remaining, "costs %v: nothing taken by the refused request", costs)
	}
}

// TestAttackDenyRule: an Envoy rule of requests_per_unit: 0 (a ban list, in
// envoyproxy/ratelimit's own example; rules.Rule.Deny) must not keep the
// engine from building (it has no valid core.Limit), denies every request
// reaching it, and, all or nothing, lets no other descriptor of such a
// request take anything.
func TestAttackDenyRule(t *testing.T) {
	ctx := context.Background()
	snap, err := rules.Parse("envoy.yaml", []byte(`
domain: edge
descriptors:
  - key: banned
    rate_limit:
      unit: hour
      requests_per_unit: 0
  - key: tried
    rate_limit:
      unit: hour
      requests_per_unit: 0
    shadow_mode: true
  - key: remote_address
    rate_limit:
      unit: hour
      requests_per_unit: 5
`))
	require.NoError(t, err)
	e, err := engine.New(ctx, memStore(t), newSource(snap))
	require.NoError(t, err)
	addr := engine.Descriptor{Entries: []rules.Entry{{Key: "remote_address", Value: "10.0.0.9"}}, Cost: 2}
	banned := engine.Descriptor{Entries: []rules.Entry{{Key: "banned", Value: "10.0.0.9"}}, Cost: 1}
	for range 3 {
		res, err := e.Descriptors(ctx, "edge", []engine.Descriptor{addr, banned})
		require.NoError(t, err)
		require.False(t, res.Allowed)
		require.Equal(t, "edge.banned", res.Statuses[1].Rule.ID)
		require.Equal(t, int64(5), res.Statuses[0].Result.Remaining, "a denied request took from another descriptor's counter")
	}
	tried := engine.Descriptor{Entries: []rules.Entry{{Key: "tried", Value: "x"}}, Cost: 1}
	res, err := e.Descriptors(ctx, "edge", []engine.Descriptor{addr, tried})
	require.NoError(t, err)
	require.True(t, res.Allowed, "a Deny rule in shadow denies nothing")
	require.Equal(t, int64(3), res.Statuses[0].Result.Remaining)
}

// TestAttackOnlyDenyRules: a rule set of Deny rules alone builds no
// limiter at all; its descriptors, negative ones included, are decided.
func TestAttackOnlyDenyRules(t *testing.T) {
	ctx := context.Background()
	snap, err := rules.Parse("envoy.yaml", []byte(`
domain: edge
descriptors:
  - key: banned
    rate_limit:
      unit: minute
      requests_per_unit: 0
`))
	require.NoError(t, err)
	e, err := engine.New(ctx, memStore(t), newSource(snap))
	require.NoError(t, err)
	for _, d := range []engine.Descriptor{
		{Entries: []rules.Entry{{Key: "banned", Value: "x"}}, Cost: 1},
		{Entries: []rules.Entry{{Key: "banned", Value: "x"}}, Cost: 3, Negative: true},
		{Entries: []rules.Entry{{Key: "banned", Value: "x"}}, Cost: 0},
	} {
		res, err := e.Descriptors(ctx, "edge", []engine.Descriptor{d, {Entries: []rules.Entry{{Key: "other", Value: "y"}}, Cost: 1}})
		require.NoError(t, err)
		require.False(t, res.Allowed)
		require.Nil(t, res.Statuses[1].Rule)
	}
	// Native checks find no rule: allowed, nothing counted.
	r, err := e.Check(ctx, engine.Check{Dimension: "user", Identifier: "u", Cost: 1})
	require.NoError(t, err)
	require.True(t, r.Allowed)
}
