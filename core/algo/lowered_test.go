package algo_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/algo"
)

// TestRemainingUnderALoweredLimit: a key counted under a limit of 10 and
// then decided under a limit of 3 (a tier cleared, an override or a rule
// lowered) has used more than the new limit; every algorithm reports 0
// remaining for it (a peek, a take, a cost that can never pass), never a
// negative count of usable units.
func TestRemainingUnderALoweredLimit(t *testing.T) {
	for _, alg := range []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.GCRA, core.FixedWindow, core.SlidingWindowLog, core.SlidingWindowCounter} {
		t.Run(alg.String(), func(t *testing.T) {
			high := &runner{sp: algo.MustCompile(core.PerHour(10).WithAlgorithm(alg))}
			for i := range 8 {
				require.True(t, high.take(s1+int64(i), 1).Allowed)
			}
			low := &runner{sp: algo.MustCompile(core.PerHour(3).WithAlgorithm(alg)), st: high.st, lg: high.lg}
			for _, cost := range []int64{0, 1, 4} {
				r := low.take(s1+10, cost)
				require.False(t, cost > 0 && r.Allowed, "cost %d admitted over the lowered limit", cost)
				require.GreaterOrEqual(t, r.Remaining, int64(0), "cost %d: %+v", cost, r)
			}
		})
	}
}
