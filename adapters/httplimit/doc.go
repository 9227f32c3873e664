// Package httplimit is sluice's net/http middleware.
//
//	mux.Handle("/", httplimit.New(limiter)(handler))
//
// Every response of a limited route carries, by default, the rate-limit
// fields of package ratelimitfields (WithHeaders selects them):
//
//	RateLimit-Policy: "per-ip";q=10;w=60        every policy that applied (draft-ietf-httpapi-ratelimit-headers-10)
//	RateLimit: "per-ip";r=3;t=42                the most constraining policy: r remaining, t seconds
//	X-RateLimit-Limit: 10                       the same policy, in the de-facto form
//	X-RateLimit-Remaining: 3
//	X-RateLimit-Reset: 1767225642               epoch seconds at which it is fresh again (or delta seconds)
//	X-RateLimit-State: warning                  normal, warning (usage above 80%) or throttled
//
// and a denied request gets 429 with Retry-After (delay-seconds, rounded up,
// equal to t) and an RFC 9457 application/problem+json body of type
// quota-exceeded naming the violated policies. A request whose cost exceeds
// the capacity can never succeed: it gets 429 with no Retry-After.
//
// Package ratelimitfields says what q, w and t mean.
//
// The Decision is in the request context (DecisionFrom), so handlers can see
// the warning state; core.OnWarning and core.OnStateChange hooks fire on
// transitions, for every adapter alike.
//
// Cost: on the memory store, an allowed request under one policy keyed by
// keyfunc.IP (an IPv4 peer) takes one allocation, holding its Decision,
// the context and request that carry it, and its header values; the text
// that depends only on the policies is kept from one request to the next.
// The other adapters share that machinery (it is internal to sluice).
//
// Failure: if the limiter cannot decide (a store failure, a key function or
// WithSkip/WithCost callback that panicked, or no policy with an identity
// for the request), the default is to fail open: the request proceeds
// without rate-limit headers and the error is logged (WithLogger), at most
// one line a second with the count of lines dropped. WithErrorHandler
// replaces that: it returns true to let the request continue, or false
// once it has answered it (503, say). Every adapter has that option with
// that shape. No error text ever reaches the client unless the error
// handler writes it. A request whose decision failed because its client
// left (its context is done) is not run.
//
// Paths: the Path of the keyfunc.Request, which Match.Routes compares, is
// the path as a Go 1.22+ ServeMux matches it: decoded segment by segment,
// with an encoded slash kept inside its segment ("/files/a%2Fb" is one
// segment, as the mux routes it). See docs/keys.md.
package httplimit
