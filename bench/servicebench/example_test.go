package servicebench_test

import (
	"fmt"

	"github.com/sluicehq/sluice/bench/servicebench"
)

// Both servers load the same rules, in envoyproxy/ratelimit's format; every
// check of the load is one descriptor (user, N).
func Example() {
	fmt.Print(string(servicebench.RulesYAML()))
	fmt.Println(servicebench.Users(3))
	// Output:
	// # The service benchmark's rules: one counter per user value.
	// domain: sluice-bench
	// descriptors:
	//   - key: user
	//     rate_limit:
	//       unit: second
	//       requests_per_unit: 1000000
	//   - key: tiny
	//     rate_limit:
	//       unit: minute
	//       requests_per_unit: 5
	// [0 1 2]
}
