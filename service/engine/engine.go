// Package engine decides ratelimitd's checks: every front door (the native
// gRPC API, Envoy's rate-limit protocol, the HTTP JSON API) translates its
// request into a Check or a Descriptors call on one Engine, which decides it
// on a core.Limiter built from the current rules snapshot, over one store.
// None of the front doors decides anything itself.
package engine

import (
	"time"

	"github.com/sluicehq/sluice/core"
)

// Check is one question to the engine: may identifier, of the given
// dimension, spend cost units on endpoint now?
type Check struct {
	// Dimension names what Identifier is: "user", "ip", "api_key" or any
	// name a rule uses. Required.
	Dimension string
	// Identifier is the caller counted: a user id, an address, a key.
	// Required.
	Identifier string
	// Endpoint is the operation called ("/api/v1/orders"); rules match it
	// by their endpoint patterns. Empty matches only rules for every
	// endpoint.
	Endpoint string
	// Rule, when set, decides the check under that rule only (the HTTP
	// API's rule_id); it must exist and its dimension must be Dimension.
	Rule string
	// Cost is how many units the check takes: 0 peeks (nothing consumed).
	// Negative is invalid.
	Cost int64
	// IdempotencyKey, when set, makes a repeat of an admitted check with the
	// same key and fields free (within the engine's idempotency TTL and
	// repeat bound): a retried call is not counted twice.
	IdempotencyKey string
	// ClientTime is the caller's clock when it made the call, or the zero
	// Time. It is a bounded hint only (reported skew, never the clock the
	// decision is made on).
	ClientTime time.Time
}

// Result is the engine's answer to one Check.
type Result struct {
	// Allowed is false when a rule (not in shadow) denied the check.
	Allowed bool
	// Rule is the rule that decided: the denying one, or the one closest
	// to its limit; empty when no rule applies (the check is allowed and
	// nothing is counted).
	Rule string
	// Limit is the binding rule's capacity (the limit applied: a tier's or
	// an override's when there is one); Used is Limit - Remaining.
	Limit, Remaining, Used int64
	// ResetAt is when the binding rule's key is fresh again; RetryAfter,
	// when denied, is the wait until a check of the same cost passes
	// (core.RetryNever: never).
	ResetAt    time.Time
	RetryAfter time.Duration
	// State is the binding key's warning state (Normal, Warning above 80%
	// usage, Throttled when denied).
	State core.State
	// Decision is the whole decision, one PolicyResult per rule that
	// applied, for the rate-limit fields (ratelimitfields.Config.Format).
	Decision core.Decision
}
