package core_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// A queue consumer limits what it does per customer with the same Limiter,
// store and policy as the HTTP middleware: Allow counts under the identity
// the policy's Key would return.
func ExampleLimiter_Allow() {
	s, err := memorystore.New()
	if err != nil {
		panic(err)
	}
	defer s.Close()
	l, err := core.NewLimiter(s, []core.Policy{
		{Name: "per-customer", Key: keyfunc.Header("X-Customer"), Limit: core.PerMinute(2)},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 3 {
		r, err := l.Allow(ctx, "per-customer", "acme")
		if err != nil {
			panic(err)
		}
		fmt.Println(r.Allowed, r.Remaining, r.RetryAfter.Round(time.Second))
	}
	// Output:
	// true 1 0s
	// true 0 0s
	// false 0 30s
}

// A webhook sender shapes its calls to 10 a second per receiver instead of
// dropping them: Wait sleeps until the next slot, and gives up at once when
// the slot is beyond the context's deadline.
func ExampleLimiter_Wait() {
	now := time.Unix(1_700_000_000, 0) // a clock that stands still, for exact output
	s, err := memorystore.New(memorystore.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	defer s.Close()
	l, err := core.NewLimiter(s, []core.Policy{
		{Name: "webhooks", Key: keyfunc.Const("unused"), Limit: core.PerSecond(10).WithBurst(1)},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	wait := func(ctx context.Context) (time.Duration, error) {
		r, err := l.Wait(ctx, "webhooks", "https://hooks.example/a")
		return time.UnixMicro(r.At).Sub(now), err // its slot, from now
	}
	if _, err := wait(ctx); err != nil { // the first passes at once
		panic(err)
	}
	// The next slot is 100ms away: a Wait with 10ms left gives up at once,
	// counting nothing.
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	_, err = wait(short)
	fmt.Println(errors.Is(err, core.ErrWouldExceedDeadline))
	for range 2 { // each sleeps until its slot, one interval after the one before
		slot, err := wait(ctx)
		if err != nil {
			panic(err)
		}
		fmt.Println(slot)
	}
	// Output:
	// true
	// 100ms
	// 200ms
}

// A webhook sender books its next deliveries instead of polling: each
// Reserve holds the next slot of the receiver's queue (on Redis, across
// every instance), and a delivery that will not be made gives its slot back.
func ExampleLimiter_Reserve() {
	now := time.Unix(1_700_000_000, 0) // a clock that stands still, for exact output
	s, err := memorystore.New(memorystore.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	defer s.Close()
	l, err := core.NewLimiter(s, []core.Policy{
		{Name: "webhooks", Key: keyfunc.Const("unused"), Limit: core.PerSecond(10).WithBurst(1).WithAlgorithm(core.LeakyBucket)},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	var last *core.Reservation
	for range 3 {
		r, err := l.Reserve(ctx, "webhooks", "https://hooks.example/a", time.Second)
		if err != nil {
			panic(err)
		}
		fmt.Println(r.OK(), r.Result().RetryAfter) // the wait until the slot
		last = r
	}
	if err := last.Cancel(ctx); err != nil { // that delivery is not needed after all
		panic(err)
	}
	r, err := l.Reserve(ctx, "webhooks", "https://hooks.example/a", 150*time.Millisecond)
	if err != nil {
		panic(err)
	}
	fmt.Println(r.OK(), r.Result().RetryAfter) // the freed slot, 200ms away, is beyond the bound
	// Output:
	// true 0s
	// true 100ms
	// true 200ms
	// false 200ms
}
