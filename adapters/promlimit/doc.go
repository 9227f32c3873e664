// Package promlimit exports what a sluice limiter decides, and what its
// guarded store goes through, as Prometheus metrics.
//
// A Collector is at once a prometheus.Collector, a core.Observer and a
// guard.Observer. Build one, give it to the limiter (and to the guard, if
// the store has one), and register it:
//
//	metrics, err := promlimit.New()
//	gs, err := guard.New(redis, guard.WithObserver(metrics))
//	lim, err := core.NewLimiter(gs, policies, core.WithObserver(metrics))
//	prometheus.MustRegister(metrics)
//
// # Metrics
//
// With the default namespace "sluice":
//
//   - sluice_decisions_total{policy, outcome}: policy results, by outcome
//     (see below). A request checked under two policies counts once under
//     each.
//   - sluice_decision_duration_seconds: a histogram of the time each Check,
//     CheckWith or Decide took, errors included.
//   - sluice_check_errors_total{reason}: checks that returned an error to
//     the caller, so that the adapter had to fail open or closed itself:
//     no_key (the key function found no identity), invalid (a negative
//     cost, an invalid limit), context (the caller's context ended) or
//     store (the store failed and no guard answered for it).
//   - sluice_deny_cache_hits_total{policy}: policy results answered by the
//     guard's deny cache without a backend call.
//   - sluice_store_errors_total{kind}: failed or timed-out backend calls
//     seen by a guard, by guard.ErrorKind: timeout, connection, closed,
//     backend.
//   - sluice_circuit_state: the guard's circuit breaker, 0 closed, 1 open,
//     2 half-open.
//   - sluice_circuit_transitions_total{to}: the breaker's transitions, by
//     the state entered (closed, open, half_open); a gauge scraped every 15
//     seconds can miss an open circuit that recovered in between, this
//     cannot.
//
// The outcome of a policy result is, in this order: failed_open,
// failed_closed or fallback when the guard answered by its failure mode
// (core.Result.Source); repeat when the request repeated an admitted one
// under its idempotency key and passed uncounted; shadow_denied when a
// shadow policy would have denied it; denied; warning when it was allowed
// but the key is in the Warning state; allowed otherwise.
//
// # Cardinality
//
// The only unbounded-looking label is policy, and it holds policy names,
// which come from the configuration: never a key, an identity, a route or a
// tier. Every other label has a fixed set of values. All the series of a
// policy are created the first time the policy decides, at zero, so
// rate() and increase() see them from the start.
//
// One Collector observes one guard.Store: the circuit gauge follows the
// transitions it is told about. To watch several guarded stores, build one
// Collector per store with WithConstLabels telling them apart.
//
// # Cost
//
// Decided does no allocation once a policy has been seen: the series of
// each policy are resolved once and kept in a copy-on-write map, read
// without a lock; every update is an atomic add.
package promlimit
