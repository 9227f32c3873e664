package core_test

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// A service that names each policy, identity and cost itself decides them
// as one group. With an idempotency key, a retry of an admitted group (the
// same key, scope and ops) is free: here the client retries its order
// twice and one unit is counted.
func ExampleLimiter_CheckGroupWith() {
	store, err := memorystore.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	limiter, err := core.NewLimiter(store, []core.Policy{
		// The Key of a policy decided only by groups is never called.
		{Name: "orders", Key: keyfunc.Const("unused"), Limit: core.PerMinute(5)},
		{Name: "api", Key: keyfunc.Const("unused"), Limit: core.PerMinute(100)},
	}, core.WithIdempotency(core.Idempotency{}))
	if err != nil {
		panic(err)
	}
	ops := []core.GroupOp{
		{Policy: "orders", Identity: "user-7", Cost: 1},
		{Policy: "api", Identity: "user-7", Cost: 1},
	}
	call := core.GroupCall{IdempotencyKey: "order-1234", Scope: []string{"/api/v1/orders"}}
	for range 3 {
		d, err := limiter.CheckGroupWith(context.Background(), ops, call)
		if err != nil {
			panic(err)
		}
		b := d.Bound()
		fmt.Println(d.Allowed, d.Repeat, b.Policy, b.Remaining)
	}
	// Output:
	// true false orders 4
	// true true orders 4
	// true true orders 4
}

// A caller deciding many groups one after the other keeps one Decision and
// has each written to it in place, its results in one array of its own.
func ExampleLimiter_CheckGroupTo() {
	store, err := memorystore.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	limiter, err := core.NewLimiter(store, []core.Policy{
		{Name: "orders", Key: keyfunc.Const("unused"), Limit: core.PerMinute(2)},
	})
	if err != nil {
		panic(err)
	}
	results := make([]core.PolicyResult, 0, 4) // one result per group
	var d core.Decision
	for _, user := range []string{"ann", "bob", "ann", "ann"} {
		call := core.GroupCall{Results: results[len(results) : len(results) : len(results)+1]}
		results = results[:len(results)+1]
		if err := limiter.CheckGroupTo(context.Background(), []core.GroupOp{{Policy: "orders", Identity: user, Cost: 1}}, call, &d); err != nil {
			panic(err)
		}
		fmt.Println(user, d.Allowed, d.Bound().Remaining)
	}
	// Output:
	// ann true 1
	// bob true 1
	// ann true 0
	// ann false 0
}
