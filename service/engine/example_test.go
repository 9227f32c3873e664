package engine_test

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rules"
)

func Example() {
	ctx := context.Background()
	store, err := memorystore.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	src := rules.NewBytes("rules.yaml", []byte(`
rules:
  - name: orders-per-user
    dimension: user
    endpoints: [/api/v1/orders]
    algorithm: fixed_window
    rate: 3
    period: 1h
`))
	e, err := engine.New(ctx, store, src)
	if err != nil {
		panic(err)
	}
	c := engine.Check{Dimension: "user", Identifier: "alice", Endpoint: "/api/v1/orders", Cost: 1}
	for range 4 {
		r, err := e.Check(ctx, c)
		if err != nil {
			panic(err)
		}
		fmt.Println(r.Allowed, r.Rule, r.Remaining, r.State)
	}
	// A check no rule applies to is allowed and counts nothing.
	r, _ := e.Check(ctx, engine.Check{Dimension: "user", Identifier: "alice", Endpoint: "/health", Cost: 1})
	fmt.Printf("%v %q\n", r.Allowed, r.Rule)
	// Output:
	// true orders-per-user 2 normal
	// true orders-per-user 1 normal
	// true orders-per-user 0 warning
	// false orders-per-user 0 throttled
	// true ""
}
