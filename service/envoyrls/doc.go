// Package envoyrls serves Envoy's rate-limit protocol,
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, on
// ratelimitd's engine, with the published Go types of go-control-plane, and
// envoyproxy/ratelimit's HTTP /json endpoint on the same decisions.
//
// Envoy, Istio, Contour and Emissary send a domain and descriptors (ordered
// key/value entries built by their route actions); the engine matches each
// descriptor to a rule (rules read from envoyproxy/ratelimit's YAML format
// or ours) and decides them all or nothing: when one descriptor is over its
// limit, nothing of the request is counted (envoyproxy/ratelimit
// increments each independently, over the limit too).
//
// Each status is the one envoyproxy/ratelimit gives for the same rules and
// sequence, but for the differences docs/service.md names (all or nothing,
// negative hits, bans, rule IDs as names): current_limit, limit_remaining
// after the hits up to the descriptor in request order, and
// duration_until_reset until the unit's window ends, in whole seconds, so
// that Envoy can emit X-RateLimit-* itself
// (enable_x_ratelimit_headers). Envoy's units are calendar units without a
// multiplier: a rule whose period is not one of them is reported in the
// nearest unit with a scaled count, rounded down (see EnvoyLimit). The
// response's response_headers_to_add carry the IETF RateLimit and
// RateLimit-Policy fields of the decision, and Retry-After when over limit.
package envoyrls
