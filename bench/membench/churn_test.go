package membench_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/bench/membench"
)

// The histogram's quantiles are within 1/16 of the exact ones.
func TestHistogramQuantiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h membench.Histogram
	var all []time.Duration
	for range 100_000 {
		d := time.Duration(rng.ExpFloat64() * 5000)
		h.Add(d)
		all = append(all, max(d, 1))
	}
	slices.Sort(all)
	require.Equal(t, int64(len(all)), h.N())
	require.Equal(t, all[len(all)-1], h.Max())
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		exact := all[int(q*float64(len(all)))]
		got := h.Quantile(q)
		require.GreaterOrEqual(t, got, exact, "q %v", q)
		require.LessOrEqual(t, float64(got), float64(exact)*(1+1.0/16)+1, "q %v", q)
	}
}

// A short churn run inserts new keys and times hot decisions, with the
// sweeper on and off.
func TestChurnRuns(t *testing.T) {
	for _, sweeper := range []bool{true, false} {
		r, err := membench.Churn(300*time.Millisecond, sweeper)
		require.NoError(t, err)
		require.Equal(t, sweeper, r.Sweeper)
		require.Greater(t, r.Decisions, int64(1000))
		require.Greater(t, r.ChurnKeys, int64(1000))
		require.LessOrEqual(t, r.P50, r.P99)
		require.LessOrEqual(t, r.P99, r.P999)
		require.LessOrEqual(t, r.P999, r.Max)
		require.Positive(t, r.InsertMax)
	}
}
