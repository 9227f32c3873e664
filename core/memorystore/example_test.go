package memorystore_test

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
)

func Example() {
	store, err := memorystore.New(memorystore.WithMaxKeys(100_000))
	if err != nil {
		panic(err)
	}
	defer store.Close()

	ctx := context.Background()
	limit := core.PerMinute(3).WithAlgorithm(core.SlidingWindowLog)
	// One op: a cost of 1 for user:42 under the "api" policy.
	ops := []core.Op{{Key: core.Key{Identity: "user:42", Policy: "api"}, Limit: limit, Cost: 1}}
	out := make([]core.Result, len(ops))
	for i := 0; i < 4; i++ {
		if err := store.Take(ctx, ops, out); err != nil {
			panic(err) // a memory store fails only on invalid input
		}
		fmt.Println(out[0].Allowed, out[0].Remaining, out[0].State)
	}
	// Output:
	// true 2 normal
	// true 1 normal
	// true 0 warning
	// false 0 throttled
}
