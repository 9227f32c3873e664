package algo_test

import (
	"fmt"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/algo"
)

// Step is a pure function of the stored state, the instant and the cost.
func ExampleSpec_Step() {
	sp, err := algo.Compile(core.PerSecond(2), core.Thresholds{})
	if err != nil {
		panic(err)
	}
	var st algo.State
	now := int64(1_700_000_000_000_000) // µs
	for i := 0; i < 3; i++ {
		var o algo.Outcome
		sp.Step(&st, &o, now, 1)
		r := sp.Result(&o)
		fmt.Println(r.Allowed, r.Remaining, r.RetryAfter, r.State)
	}
	// Output:
	// true 1 0s normal
	// true 0 0s warning
	// false 0 500ms throttled
}
