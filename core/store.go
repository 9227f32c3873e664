package core

import (
	"context"
	"fmt"
	"time"
)

// Store keeps the state of every key and makes each decision atomically.
//
// Implementations are safe for concurrent use. Take with cost >= 1 consumes
// cost units when the request is admitted and nothing when it is denied; cost
// 0 peeks and writes nothing. A cost above the Limit's capacity is denied with
// RetryAfter RetryNever. An invalid Limit is an error wrapping
// ErrInvalidLimit, an empty key ErrNoKey, a negative cost ErrInvalidCost.
// Any other error means the backend failed: the Result is then meaningless.
//
// The state of a key is interpreted under the Limit passed with it: use one
// Limit per key (the Limiter puts the policy name in the key).
type Store interface {
	Take(ctx context.Context, key string, l Limit, cost int64) (Result, error)
	Reset(ctx context.Context, key string, l Limit) error
}

// SplitKeyStore is a Store that also takes a Limiter's key in its two parts,
// so that no key string is built per decision. TakeSplit(ctx, identity,
// policy, l, cost) must decide exactly as Take(ctx, identity+"\x00"+policy,
// l, cost) does, on the same state (Reset, Refund and overrides use the
// joined key). The Limiter calls it, when its store implements it, for a
// request that one policy applies to. The memory store implements it.
type SplitKeyStore interface {
	Store
	TakeSplit(ctx context.Context, identity, policy string, l Limit, cost int64) (Result, error)
}

// Op is one decision of a group made by BatchStore.TakeAll.
type Op struct {
	Key   string
	Limit Limit
	Cost  int64
	// Shadow marks a policy under trial: its denial is reported but does not
	// deny the group.
	Shadow bool
}

// BatchStore is a Store that decides several keys all or nothing, and can
// give units back. Both sluice stores implement it.
type BatchStore interface {
	Store
	// TakeAll decides every op, writing op i's Result to out[i]. If any op
	// that is not Shadow is denied, no op consumes anything: the denied ones
	// record their Throttled state, and the others report Allowed with their
	// unconsumed state. len(out) must be len(ops).
	TakeAll(ctx context.Context, ops []Op, out []Result) error
	// Refund gives back the cost units of the admission of key decided at
	// instant at (its Result.At), exactly; when that is impossible (its
	// window has passed, its log entry has expired, its units have drained
	// from the bucket) it gives back nothing, or, for the buckets, only the
	// part of it provably still held. It never takes the key below its fresh
	// state and never lets the key admit more than its Limit promises. Each
	// admission may be refunded once: the caller must not refund the same
	// admission twice (Limiter.Refund refunds a Decision at most once).
	//
	// override is the admission's Result.Override. Zero: the admission was
	// made on key's own state under l, and is given back there (whether or
	// not an override applies now). Nonzero: it was made on that
	// override's state under the override's limit, and is given back there
	// while that override is still in force; once it has ended, been
	// cleared or been replaced, nothing is given back (its state is gone,
	// and no unit ever moves to another override's state or to key's own).
	Refund(ctx context.Context, key string, l Limit, cost int64, at int64, override uint64) error
}

// Override replaces the Limit of one key until an instant: a temporary raise
// for a customer, or, with a zero Limit, a block.
type Override struct {
	// Limit replaces the key's limit; the zero Limit blocks the key.
	Limit Limit
	// Until is when the override ends (required).
	Until time.Time
}

// Blocks reports whether o blocks its key.
func (o Override) Blocks() bool { return o.Limit == (Limit{}) }

// OverrideStore is a Store that keeps per-key overrides where every instance
// sees them at once (with the Redis store: in Redis, next to the key).
type OverrideStore interface {
	SetOverride(ctx context.Context, key string, o Override) error
	ClearOverride(ctx context.Context, key string) error
}

// ValidateOverride reports why o cannot be used.
func ValidateOverride(o Override, now time.Time) error {
	if !o.Until.After(now) {
		return fmt.Errorf("%w: Override.Until: must be in the future, got %s", ErrInvalidLimit, o.Until)
	}
	if o.Blocks() {
		return nil
	}
	return o.Limit.Validate()
}
