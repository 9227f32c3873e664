package membench_test

import (
	"fmt"
	"log"

	"github.com/sluicehq/sluice/bench/membench"
)

// Every implementation is configured to the same limit, so each admits the
// whole first burst of a fresh key: Rate decisions in a row. (Which of the
// following ones pass depends on how much was refilled meanwhile.)
func ExampleImpls() {
	all := true
	for _, impl := range membench.Impls() {
		l, err := impl.New(membench.Config{})
		if err != nil {
			log.Fatal(err)
		}
		admitted := 0
		for range membench.Rate {
			if l.Allow("user:1") {
				admitted++
			}
		}
		if err := l.Close(); err != nil {
			log.Fatal(err)
		}
		if admitted != membench.Rate {
			all = false
			fmt.Printf("%s admitted %d\n", impl.Name, admitted)
		}
	}
	fmt.Printf("every implementation admits the first %d: %v\n", membench.Rate, all)
	// Output: every implementation admits the first 1000: true
}

// The keys of the scenarios are distinct strings built once and shared.
func ExampleKeys() {
	fmt.Println(membench.Keys(3))
	// Output: [user:0 user:1 user:2]
}
