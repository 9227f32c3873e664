package guard_test

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// A guard in front of a store that has failed: with the local fallback,
// the limit still holds, divided among the expected instances.
func Example() {
	backend, _ := memorystore.New() // in production: the Redis store
	backend.Close()                 // a closed store fails like a dead Redis

	store, err := guard.New(backend,
		guard.WithFallback(2), // two instances share the limit
		guard.WithDenyCache(guard.DenyCache{MaxKeys: 10_000}),
		guard.WithLogger(slog.New(slog.DiscardHandler)),
	)
	if err != nil {
		panic(err)
	}
	defer store.Close()
	lim, _ := core.NewLimiter(store, []core.Policy{
		{Name: "api", Key: keyfunc.Header("X-API-Key"), Limit: core.PerMinute(6)},
	})
	req := keyfunc.Static{Headers: map[string][]string{"X-API-Key": {"k1"}}}
	for range 4 {
		d, _ := lim.Check(context.Background(), req)
		r := d.Bound()
		fmt.Println(d.Allowed, r.Remaining, r.Source)
	}
	fmt.Println("circuit:", store.Circuit())
	// Output:
	// true 2 fallback
	// true 1 fallback
	// true 0 fallback
	// false 0 fallback
	// circuit: closed
}
