package rulesbench_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/bench/rulesbench"
)

// The generated rules are valid at every size, spread over the dimensions,
// and the measured check matches the same rules of its dimension at every
// size.
func TestRulesAtEverySize(t *testing.T) {
	var want []string
	for _, n := range []int{10, 1000, 20_000} {
		s, err := rulesbench.Snapshot(n)
		require.NoError(t, err)
		require.Len(t, s.Rules(), n)
		var got []string
		for _, r := range s.Match("", rulesbench.Dimension, rulesbench.Endpoint) {
			got = append(got, r.ID)
		}
		if want == nil {
			want = got
		}
		require.Equal(t, want, got, "%d rules", n)
		withPattern := 0
		for _, r := range s.Rules() {
			if len(r.Endpoints) > 0 {
				withPattern++
			}
		}
		require.Equal(t, n-len(rulesbench.Dimensions), withPattern, "%d rules: all but one per dimension have an endpoint pattern", n)
	}
}

// A database filled with n rules loads them all, and an update among them
// is valid.
func TestDB(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "rules.db")
	require.NoError(t, rulesbench.FillDB(ctx, path, 2000))
	took, err := rulesbench.LoadDB(ctx, path, 2000)
	require.NoError(t, err)
	require.Positive(t, took)
	_, err = rulesbench.UpdateDB(ctx, path, 2000, 2)
	require.NoError(t, err)
	_, err = rulesbench.LoadDB(ctx, path, 2001)
	require.ErrorContains(t, err, "2000 rules loaded, want 2001")
}

func TestBuild(t *testing.T) {
	b, err := rulesbench.Build(context.Background(), 1000, time.Millisecond)
	require.NoError(t, err)
	require.GreaterOrEqual(t, b.Builds, 2)
	require.Positive(t, b.Snapshot)
	require.Positive(t, b.Engine)
	require.Positive(t, b.SnapshotHeap)
}
