// Package otellimit traces sluice decisions with OpenTelemetry: one span
// per Check, CheckWith or Decide of a core.Limiter, a child of the span in
// the request's context (the server span of otelhttp or otelgrpc, say).
//
//	tracing := otellimit.New() // otel.GetTracerProvider() unless WithTracerProvider
//	lim, err := core.NewLimiter(store, policies, core.WithObserver(tracing))
//
// The span, named "sluice.decide" by default, starts when the decision
// started and ends when it was made, so its duration is the decision's.
// A denial is not an error: the span's status is left unset, and the
// attributes say what happened. A check that returned an error (no key, a
// store failure without a guard) records the error and sets the status to
// Error.
//
// # Attributes
//
// The span carries the decision and its binding policy (the most
// constraining one, which the response headers describe) as plain
// attributes, so a trace backend can search and group by them:
//
//   - sluice.allowed (bool): the request was admitted;
//   - sluice.policies (int): how many policies applied (0: none matched
//     and the request was not limited; the attributes below are then
//     absent);
//   - sluice.policy (string): the binding policy's name;
//   - sluice.outcome (string): allowed, warning, denied, shadow_denied,
//     repeat, failed_open, failed_closed or fallback, as in the metrics of
//     adapters/promlimit;
//   - sluice.remaining (int), sluice.limit (int): requests left now, and
//     the capacity (the configured one when the store could not say,
//     failed open);
//   - sluice.retry_after_ms (int): the wait before a retry can succeed,
//     rounded up to the millisecond; 0 when allowed, -1 when no wait will
//     do (the cost exceeds the capacity);
//   - sluice.state (string): normal, warning or throttled;
//   - sluice.source (string): store, deny_cache, failed_open, failed_closed
//     or fallback;
//   - sluice.tier (string): the caller's tier, when the policy has tiers;
//   - sluice.repeat (bool): present and true when the request repeated an
//     admitted one under its idempotency key.
//
// When more than one policy applied, each also gets an event named
// "sluice.policy" with the same per-policy attributes (sluice.policy to
// sluice.tier), in the limiter's order. Keys and identities are never
// recorded: they are often IP addresses or API keys.
//
// Attributes are set after the span starts, and only when it is recorded,
// so a decision that is not sampled costs a span start and end and
// nothing more; a sampler sees the span's name and parent, not the
// attributes.
package otellimit
