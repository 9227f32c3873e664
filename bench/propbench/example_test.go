package propbench_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/bench/propbench"
)

// The figures of a run are quantiles of its delays.
func ExampleQuantile() {
	delays := []time.Duration{3 * time.Millisecond, 40 * time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond}
	fmt.Println(propbench.Quantile(delays, 0.5), propbench.Quantile(delays, 1))
	// Output: 3ms 40ms
}
