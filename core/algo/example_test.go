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

// Book admits a request for a later slot instead of denying it: the leaky
// bucket as a queue. Bookings are served in order, and a take waits behind
// them.
func ExampleSpec_Book() {
	sp := algo.MustCompile(core.PerSecond(2).WithBurst(1))
	var st algo.State
	now := int64(1_700_000_000_000_000) // µs
	for i := 0; i < 3; i++ {
		var o algo.Outcome
		sp.Book(&st, &o, now, 1, 1_000_000) // at most one second ahead
		r := sp.Result(&o)
		fmt.Println(r.Allowed, r.RetryAfter, o.At-now)
	}
	var o algo.Outcome
	sp.Step(&st, &o, now, 1)
	fmt.Println(o.Allowed, sp.Result(&o).RetryAfter)
	// Output:
	// true 0s 0
	// true 500ms 500000
	// true 1s 1000000
	// false 1.5s
}
