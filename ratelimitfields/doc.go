// Package ratelimitfields computes the rate-limit fields of a
// core.Decision, the signal every sluice adapter sends to its clients,
// whatever the protocol: as HTTP header fields (net/http, Gin, Echo, Fiber)
// and as gRPC metadata and status details (grpclimit). Config, which every
// adapter's WithHeaders option takes, says which fields are sent.
//
// A limited response carries, by default:
//
//	RateLimit-Policy: "per-ip";q=10;w=60        every policy that applied (draft-ietf-httpapi-ratelimit-headers-10)
//	RateLimit: "per-ip";r=3;t=42                the most constraining policy: r remaining, t seconds
//	X-RateLimit-Limit: 10                       the same policy, in the de-facto form
//	X-RateLimit-Remaining: 3
//	X-RateLimit-Reset: 1767225642               epoch seconds at which it is fresh again (or delta seconds)
//	X-RateLimit-State: warning                  normal, warning (usage above 80%) or throttled
//
// and a denied one Retry-After (delay-seconds, rounded up, equal to t) and,
// over HTTP, an RFC 9457 application/problem+json body (Problem) of type
// quota-exceeded naming the violated policies. A request whose cost
// exceeds the capacity can never succeed: it gets no Retry-After.
//
// q is the capacity of the limit applied (the most requests at once: the
// PolicyResult's Capacity, an override's, a tier's or a fallback's when
// one applied, as core states it); w is the seconds
// in which that capacity is restored (the period of a window;
// Burst×Period/Rate for a bucket). t is the time until more quota is
// available: when denied, the seconds until this request would be allowed,
// never 0 while limited. gRPC sends the same values under the lower-case
// names (Field.String in lower case), with the retry delay (Retry) and a
// text per violated policy in its status details.
//
// Shadow policies never appear, and a Decision the store could not make
// (fail-open) has no fields: its quota is unknown. docs/headers.md has
// the full rules.
//
// The adapters format the same fields without an allocation per request,
// with a cache of the text each policy needs; that machinery is internal
// to sluice (it runs the same code as Config.Format), so this package is
// only the vocabulary and the plain functions.
package ratelimitfields
