package algo_test

import (
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/algo"
)

func BenchmarkStep(b *testing.B) {
	for _, a := range []core.Algorithm{core.TokenBucket, core.FixedWindow, core.SlidingWindowCounter} {
		b.Run(a.String(), func(b *testing.B) {
			sp := algo.MustCompile(core.PerSecond(1000).WithAlgorithm(a))
			var st algo.State
			now := int64(1_700_000_000_000_000)
			var res core.Result
			for b.Loop() {
				now += 700
				var o algo.Outcome
				sp.Step(&st, &o, now, 1)
				res = sp.Result(&o)
			}
			_ = res
		})
	}
}
