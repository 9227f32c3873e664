package memorystore_test

import (
	"context"
	"fmt"
	"time"

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

// The waits under a block are those of the key as a whole: a key drained
// under its own 10 a minute and then blocked for a second is told to come
// back when its own next unit does, not when the block ends; so is a key
// raised to 100 an hour for a second, once the raise is spent.
func ExampleStore_SetOverride() {
	now := time.Unix(1_800_000_000, 0)
	store, err := memorystore.New(memorystore.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	defer store.Close()

	ctx := context.Background()
	limit := core.PerMinute(10) // a token bucket: a unit back every 6 s
	take := func(k core.Key, cost int64) core.Result {
		out := make([]core.Result, 1)
		if err := store.Take(ctx, []core.Op{{Key: k, Limit: limit, Cost: cost}}, out); err != nil {
			panic(err)
		}
		return out[0]
	}
	blocked, raised := core.Key{Identity: "ann"}, core.Key{Identity: "bob"}
	take(blocked, 10) // drained
	take(raised, 10)
	if err := store.SetOverride(ctx, blocked, core.Override{Until: now.Add(time.Second)}); err != nil {
		panic(err)
	}
	if err := store.SetOverride(ctx, raised, core.Override{Limit: core.PerHour(100), Until: now.Add(time.Second)}); err != nil {
		panic(err)
	}
	take(raised, 100) // the raise spent
	now = now.Add(500 * time.Millisecond)
	fmt.Println(take(blocked, 1).RetryAfter, take(raised, 1).RetryAfter)
	// Output:
	// 5.5s 5.5s
}
