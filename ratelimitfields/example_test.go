package ratelimitfields_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/ratelimitfields"
)

// A denied request's fields, formatted for any protocol: as HTTP headers
// here; gRPC sends the same under the lower-case names.
func ExampleConfig_Format() {
	d := &core.Decision{Results: []core.PolicyResult{{
		Policy: "per-ip", Limit: core.PerMinute(10),
		Result: core.Result{Capacity: 10, RetryAfter: 6 * time.Second, ResetAfter: time.Minute, State: core.Throttled},
	}}}
	f := ratelimitfields.Config{Reset: ratelimitfields.ResetDelta}.Format(d, time.Now())
	for field, value := range f.All() {
		fmt.Printf("%s: %s\n", field, value)
	}
	// Output:
	// RateLimit-Policy: "per-ip";q=10;w=60
	// RateLimit: "per-ip";r=0;t=6
	// X-RateLimit-Limit: 10
	// X-RateLimit-Remaining: 0
	// X-RateLimit-Reset: 60
	// X-RateLimit-State: throttled
	// Retry-After: 6
}

// Only the de-facto X-RateLimit-* family and Retry-After, as most peer
// libraries send.
func ExampleConfig_Format_xRateLimitOnly() {
	d := &core.Decision{Allowed: true, Results: []core.PolicyResult{{
		Policy: "per-ip", Limit: core.PerMinute(10),
		Result: core.Result{Allowed: true, Capacity: 10, Remaining: 7, ResetAfter: 18 * time.Second},
	}}}
	c := ratelimitfields.Config{Omit: ratelimitfields.Draft | ratelimitfields.State, Reset: ratelimitfields.ResetDelta}
	f := c.Format(d, time.Now())
	for field, value := range f.All() {
		fmt.Printf("%s: %s\n", field, value)
	}
	// Output:
	// X-RateLimit-Limit: 10
	// X-RateLimit-Remaining: 7
	// X-RateLimit-Reset: 18
}

// The problem+json body of a denied request, and its retry delay.
func ExampleProblem() {
	d := &core.Decision{Results: []core.PolicyResult{{
		Policy: "login", Limit: core.PerMinute(5),
		Result: core.Result{Capacity: 5, RetryAfter: 1500 * time.Millisecond, ResetAfter: time.Minute, State: core.Throttled},
	}}}
	wait, never := ratelimitfields.Retry(d)
	fmt.Println(wait, never)
	fmt.Print(string(ratelimitfields.Problem(d)))
	// Output:
	// 1.5s false
	// {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"Rate limit exceeded; retry in 2 seconds.","violated-policies":["login"]}
}
