package mwbench_test

import (
	"fmt"
	"log"
	"slices"

	"github.com/sluicehq/sluice/bench/mwbench"
)

// One request through sluice's middleware as the benchmark serves it: the
// bare handler's 200, with every rate-limit header of the default
// configuration.
func ExampleImpls() {
	for _, impl := range mwbench.Impls() {
		if impl.Name != "sluice" {
			continue
		}
		h, done, err := impl.Wrap(mwbench.Bare())
		if err != nil {
			log.Fatal(err)
		}
		defer done()
		w := mwbench.NewWriter()
		if err := mwbench.Check(h, w, mwbench.NewRequest(), true); err != nil {
			log.Fatal(err)
		}
		names := make([]string, 0, len(w.Header()))
		for name := range w.Header() {
			names = append(names, name)
		}
		slices.Sort(names)
		fmt.Println(w.Code)
		for _, name := range names {
			fmt.Println(name)
		}
	}
	// Output:
	// 200
	// Ratelimit
	// Ratelimit-Policy
	// X-Ratelimit-Limit
	// X-Ratelimit-Remaining
	// X-Ratelimit-Reset
	// X-Ratelimit-State
}
