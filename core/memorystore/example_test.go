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
	for i := 0; i < 4; i++ {
		r, err := store.Take(ctx, "user:42", limit, 1)
		if err != nil {
			panic(err) // a memory store fails only on invalid input
		}
		fmt.Println(r.Allowed, r.Remaining, r.State)
	}
	// Output:
	// true 2 normal
	// true 1 normal
	// true 0 warning
	// false 0 throttled
}
