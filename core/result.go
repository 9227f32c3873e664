package core

import (
	"fmt"
	"math"
	"time"
)

// State is the warning state of one key. It is stored with the key, so every
// instance that shares a store sees the same state.
//
// Transitions, with the default Thresholds: Normal becomes Warning when usage
// rises above 80% of the capacity; Warning becomes Normal when usage falls below
// 70%; any state becomes Throttled when a request is denied; Throttled becomes
// Warning (usage at or above 70%) or Normal (below) at the next allowed
// request. A key that returns to its fresh state is Normal.
type State uint8

// The three warning states.
const (
	Normal State = iota
	Warning
	Throttled
)

// String returns "normal", "warning" or "throttled".
func (s State) String() string {
	switch s {
	case Normal:
		return "normal"
	case Warning:
		return "warning"
	case Throttled:
		return "throttled"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// RetryNever is the RetryAfter of a request whose cost exceeds the capacity:
// no wait will ever let it through. It is the longest Duration, so code that
// sleeps for RetryAfter never spins.
const RetryNever = time.Duration(math.MaxInt64)

// Result is the outcome of one Store.Take.
type Result struct {
	// Allowed reports whether the request was admitted. For a peek (cost 0)
	// it reports whether a request of cost 1 would be admitted now.
	Allowed bool
	// State is the key's warning state after this request.
	State State
	// Previous is the key's warning state before this request; State !=
	// Previous marks a transition.
	Previous State
	// Source says who made the decision: the store itself (the zero value),
	// or, under a guard (package core/guard), its deny cache or its failure
	// policy.
	Source Source
	// Capacity is the most events a fresh key admits at once: the
	// Capacity of the Limit applied (the limit the headers report). A
	// store sets it for every Result it writes; in a Decision it is
	// always PolicyResult.Limit's capacity.
	Capacity int64
	// Remaining is the number of whole events usable right now, after this
	// request.
	Remaining int64
	// RetryAfter is zero when allowed; otherwise the exact wait until a
	// request of the same cost would be admitted, or RetryNever.
	RetryAfter time.Duration
	// ResetAfter is the time until the key is back to its fresh state.
	ResetAfter time.Duration
	// At is the instant the decision was made at on the store's clock, in
	// µs since the Unix epoch: Redis TIME for the Redis store, the clock
	// option when one is set. When the clock stepped back behind the key's
	// state, it is the instant the state records (see docs/algorithms.md,
	// "Clock steps"): the instant the admission was recorded at. It names
	// the admission to Store.Refund (Admission.At). Zero when no store decided (a
	// failure policy).
	At int64
	// Applied is the limit the store applied when it is not the one it was
	// given: an override's (see Store.SetOverride), or a guard's local share
	// of it in fallback (core/guard), which Capacity, Remaining and the waits
	// then describe. A Decision's results state it as their Limit: read that. nil means the given limit (a block is
	// described by the given limit too). It points to a value the store
	// shares: never modify it.
	Applied *Limit
	// Override names the override whose state the decision was made on
	// when Applied is non-nil: an override counts on its own state, fresh
	// for each override, and Store.Refund needs this name (Admission.Override) to find it
	// (or to learn that it has ended). Zero when no override applied, and
	// when the store cannot name it (an override written by an older
	// version): such an admission is not refunded.
	Override uint64
}

// Source says who made a decision.
type Source uint8

// The sources of a Result.
const (
	// FromStore: the store decided (the normal case).
	FromStore Source = iota
	// FromDenyCache: a guard answered a key it knew to be denied, without
	// calling the store. The answer is the store's earlier denial, aged.
	FromDenyCache
	// FailedOpen: the store failed and the request was allowed unchecked.
	// Capacity is the limit's; Remaining and State are unknown (zero).
	FailedOpen
	// FailedClosed: the store failed and the request was denied for a short
	// RetryAfter.
	FailedClosed
	// FromFallback: the store failed and a local in-memory limiter decided.
	FromFallback
)

// String returns "store", "deny_cache", "failed_open", "failed_closed" or
// "fallback": the names used in metrics and logs.
func (s Source) String() string {
	switch s {
	case FromStore:
		return "store"
	case FromDenyCache:
		return "deny_cache"
	case FailedOpen:
		return "failed_open"
	case FailedClosed:
		return "failed_closed"
	case FromFallback:
		return "fallback"
	}
	return fmt.Sprintf("Source(%d)", uint8(s))
}

// Degraded reports whether the store failed and the Result comes from a
// failure policy rather than the shared limit.
func (s Source) Degraded() bool { return s >= FailedOpen }

// Never reports whether the request can never be admitted (its cost exceeds
// the capacity).
func (r Result) Never() bool { return !r.Allowed && r.RetryAfter == RetryNever }

// Thresholds set the usage fractions at which a key enters and leaves the
// Warning state. The zero value means the defaults (0.8 and 0.7).
type Thresholds struct {
	// Warn: a Normal key becomes Warning when usage rises above it.
	Warn float64
	// Clear: a Warning key becomes Normal when usage falls below it.
	Clear float64
}

// defaultThresholds returns the Thresholds the zero value means.
func defaultThresholds() Thresholds { return Thresholds{Warn: 0.8, Clear: 0.7} }

// OrDefault returns t, or the defaults (Warn 0.8, Clear 0.7) if t is the
// zero value.
func (t Thresholds) OrDefault() Thresholds {
	if t == (Thresholds{}) {
		return defaultThresholds()
	}
	return t
}

// Validate reports whether 0 < Clear <= Warn < 1 (after OrDefault): nil,
// or an error wrapping ErrInvalidLimit whose *FieldError names "Warn" or
// "Clear".
func (t Thresholds) Validate() error {
	t = t.OrDefault()
	var fe *FieldError
	switch {
	case !(t.Warn > 0 && t.Warn < 1):
		fe = invalidField(ErrInvalidLimit, "Warn", "must be in (0, 1), got %v", t.Warn)
	case !(t.Clear > 0 && t.Clear <= t.Warn):
		fe = invalidField(ErrInvalidLimit, "Clear", "must be in (0, Warn], got %v", t.Clear)
	default:
		return nil
	}
	return fmt.Errorf("%s: Thresholds: %w", ErrInvalidLimit, fe)
}

// Degraded reports whether the store failed for some policy of d and a
// failure policy answered instead (see Source): the Decision did not come
// from the shared limit.
func (d *Decision) Degraded() bool {
	for i := range d.Results {
		if d.Results[i].Source.Degraded() {
			return true
		}
	}
	return false
}
