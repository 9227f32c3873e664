// Package core holds the vocabulary shared by every part of sluice and the
// Limiter that every adapter calls.
//
//   - Limit (which algorithm, how many events per period, how large a burst),
//     the Result of one decision and the per-key warning State.
//   - Store, the one interface the in-memory and Redis stores and the guard
//     implement in full: Take decides structured Ops (a Key of identity and
//     policy, a Limit, a cost, shadow) all or nothing; Refund gives an
//     Admission back; Reset, SetOverride and ClearOverride (per-key limits
//     and blocks until an instant). Package core/limitertest is its
//     conformance suite.
//   - Limiter: Policies (a name, a key function, a Limit, what requests they
//     match, tiers, shadow, refunds) checked all or nothing per request, with
//     hooks on warning-state transitions and shadow denials, admin calls
//     (Peek, Reset, SetOverride, Block, SetPolicies) and idempotent retries.
//   - Observer: sees every decision with its duration (metrics, tracing);
//     Decision.Outcome names what happened under each policy, and
//     Result.Source says whether the store decided or, behind a store from
//     package core/guard, its deny cache or its failure mode.
//
// A denial is a value, not an error: Store.Take writes a Result whose Allowed
// field is false. An error always means the backend failed or the input was
// invalid; the sentinel errors ErrInvalidLimit, ErrInvalidCost, ErrNoKey and
// ErrClosed can be matched with errors.Is. Invalid input is also a
// *FieldError, found with errors.As, that names the field at fault by its
// path ("Rate", "Limit.Burst", "ops[1].Cost") and says what is wrong with it.
//
// Time inside sluice is integer microseconds. Every algorithm is a pure
// function of its stored state, the current instant, the Limit and the cost
// (see package algo), so two stores given the same sequence of instants and
// costs return the same Results.
package core
