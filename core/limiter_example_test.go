package core_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// A Limiter holds the policies a request is decided under, here two on an
// in-memory store: 100 a minute per client address and 3 a minute per user
// on POST /login. Every policy is validated when the Limiter is built; an
// error names the policy and the field.
func ExampleNewLimiter() {
	store, err := memorystore.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	limiter, err := core.NewLimiter(store, []core.Policy{
		{Name: "per-ip", Key: keyfunc.IP(), Limit: core.PerMinute(100)},
		{
			Name:  "login",
			Key:   keyfunc.Header("X-User"),
			Limit: core.PerMinute(3),
			Match: core.Match{Methods: []string{"POST"}, Routes: []string{"/login"}},
		},
	})
	if err != nil {
		panic(err)
	}
	for _, p := range limiter.Policies() {
		fmt.Println(p.Name, p.Limit)
	}

	_, err = core.NewLimiter(store, []core.Policy{
		{Name: "login", Key: keyfunc.Header("X-User"), Limit: core.PerMinute(3), Match: core.Match{Routes: []string{"/a/**/b"}}},
	})
	fmt.Println(err)
	// Output:
	// per-ip 100/1m0s token_bucket
	// login 3/1m0s token_bucket
	// sluice: policy "login": Match.Routes[0]: pattern "/a/**/b": ** must be the last segment
}

// Check counts a request under every policy that matches it. The Decision
// says whether it is allowed and which policy binds: the one the client
// should hear about in the response headers.
func ExampleLimiter_Check() {
	// A stopped clock keeps the output the same on every run; a real
	// program calls memorystore.New() and lets time pass.
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	store, err := memorystore.New(memorystore.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	defer store.Close()
	limiter, err := core.NewLimiter(store, []core.Policy{
		{Name: "per-key", Key: keyfunc.Header("X-API-Key"), Limit: core.PerMinute(2)},
	})
	if err != nil {
		panic(err)
	}
	// keyfunc.Static is a request without a server; an adapter passes its
	// framework's request instead.
	r := keyfunc.Static{Headers: map[string][]string{"X-Api-Key": {"k-1"}}}
	for range 3 {
		d, err := limiter.Check(context.Background(), r)
		if err != nil {
			panic(err) // no identity, an invalid cost, or the store failed
		}
		b := d.Bound()
		fmt.Println(d.Allowed, b.Policy, b.Remaining, b.RetryAfter)
	}

	// Without an X-API-Key the only policy has no identity: the request
	// cannot be decided, and the caller chooses to fail open or closed.
	_, err = limiter.Check(context.Background(), keyfunc.Static{})
	fmt.Println(err)
	// Output:
	// true per-key 1 0s
	// true per-key 0 0s
	// false per-key 0 30s
	// sluice: policy "per-key": key: keyfunc: header "X-API-Key" is empty
}

// Peek reports where a request stands without counting it, for a status
// endpoint, say.
func ExampleLimiter_Peek() {
	store, err := memorystore.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	limiter, err := core.NewLimiter(store, []core.Policy{
		{Name: "per-key", Key: keyfunc.Header("X-API-Key"), Limit: core.PerMinute(5)},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	r := keyfunc.Static{Headers: map[string][]string{"X-Api-Key": {"k-1"}}}
	if _, err := limiter.Check(ctx, r); err != nil {
		panic(err)
	}
	for range 2 {
		d, err := limiter.Peek(ctx, r)
		if err != nil {
			panic(err)
		}
		fmt.Println(d.Allowed, d.Bound().Remaining)
	}
	// Output:
	// true 4
	// true 4
}

// Decide is Check for callers that keep one Decision per request (the
// adapters do), with the options of a Call: here a cost of 3 units.
func ExampleLimiter_Decide() {
	store, err := memorystore.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	limiter, err := core.NewLimiter(store, []core.Policy{
		{Name: "export", Key: keyfunc.Header("X-API-Key"), Limit: core.PerMinute(10)},
	})
	if err != nil {
		panic(err)
	}
	r := keyfunc.Static{Headers: map[string][]string{"X-Api-Key": {"k-1"}}}
	var d core.Decision
	for range 4 {
		if err := limiter.Decide(context.Background(), r, core.Call{Cost: 3}, &d); err != nil {
			panic(err)
		}
		fmt.Println(d.Allowed, d.Bound().Remaining)
	}
	// Output:
	// true 7
	// true 4
	// true 1
	// false 1
}
