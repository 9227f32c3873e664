package core

import (
	"context"
	"strconv"
	"time"
)

// Key names the state of one identity under one policy. Stores keep the two
// parts apart: neither the Limiter nor a store joins them into one string
// to decide (the Redis store builds its Redis key from them, with the
// Identity alone in the hash tag, so every policy of one identity lives in
// one Cluster slot).
//
// Identity is what a policy's key function returned (an IP, a user id); it
// must not be empty. Policy is the policy's name; a caller of a store that
// has no policies may leave it empty.
type Key struct {
	Identity string
	Policy   string
}

// Op is one decision of a Store.Take: Cost units of Key under Limit.
type Op struct {
	Key   Key
	Limit Limit
	// Cost is how many units the op takes: 0 peeks.
	Cost int64
	// Shadow marks a policy under trial: its denial is reported but does
	// not deny the other ops of its Take.
	Shadow bool
	// MaxDelay, when positive, makes the op a booking: a bucket
	// (TokenBucket, LeakyBucket, GCRA) admits Cost at its slot, the
	// earliest instant at which it fits, if that is at most MaxDelay away
	// (in whole µs; a store books at most algo.Spec.MaxDelay ahead and
	// cuts a longer bound to it), counting it now. The Result's RetryAfter
	// is then the wait until the slot and its At the slot, which names the
	// booking to Refund (see docs/algorithms.md, "Booking"). Under an
	// override a slot is booked only before the override ends (a later
	// one would be decided under the Key's own limit). A window, the op's
	// or an override's, does not book: it decides a take. Zero, the
	// default, is a take. Only a Take of one op books: a MaxDelay in a
	// Take of several ops, or a negative one, is an error (see
	// storekit.ValidateBooking).
	MaxDelay time.Duration
	// Lease is the op's policy's Policy.Lease: when positive, a lease
	// layer (package core/lease) may decide the op from a block of units
	// it took from its store earlier. Every other store ignores it.
	Lease time.Duration
}

// Admission names one admission to give back with Store.Refund: the op that
// was admitted, and its Result's At and Override.
type Admission struct {
	Key Key
	// Limit is the op's. For an admission under an override (Override
	// nonzero) the store gives back under the override's own limit, which
	// it keeps; the Limiter passes the override's (its Result.Applied).
	Limit Limit
	Cost  int64
	// At is the admission's Result.At.
	At int64
	// Override is the admission's Result.Override.
	Override uint64
	// Lease is the admitted op's Op.Lease: a lease layer gives back an
	// admission of a leased policy by its own rules (see package
	// core/lease); every other store ignores it.
	Lease time.Duration
}

// Store keeps the state of every key and makes each decision atomically.
// The memory store (package core/memorystore), the Redis store
// (core/redisstore) and the guard (core/guard) implement all of it, and
// pass the conformance suite of package core/limitertest, which a Store of
// your own should pass too; package core/storekit validates a method's
// arguments as the contract below requires.
//
// Implementations are safe for concurrent use. Every method validates its
// input: an invalid Limit is an error wrapping ErrInvalidLimit, an empty
// Key.Identity ErrNoKey, a negative cost ErrInvalidCost, a closed store
// ErrClosed; the error names the method, and holds a *FieldError (see
// errors.As) whose path names the op and the field from the method's
// arguments ("ops[1].Cost", "ops[0].Limit.Rate", "Key.Identity"). Any
// other error means the backend failed. A store must not keep ops, out, or any
// string of a Key after the call returns (a request's strings may alias
// buffers its framework reuses): it copies what it keeps.
//
// The state of a Key is interpreted under the Limit passed with it: use one
// Limit per Key (the Limiter's keys name the policy).
type Store interface {
	// Take decides every op, all or nothing, writing op i's Result to
	// out[i] (len(out) must be len(ops)). Each op names its own Key: ops
	// sharing a Key are an error (see storekit.ValidateGroup). An op with Cost >= 1 consumes
	// Cost units when admitted; Cost 0 peeks and writes nothing; a Cost
	// above the Limit's capacity is denied with RetryAfter RetryNever. If
	// any op that is not Shadow is denied a Cost >= 1, no op consumes
	// anything: the denied ones record their Throttled state, and the
	// others report Allowed with their unconsumed state. A peek's answer
	// (Allowed: whether a cost of 1 would pass) denies nothing. On an error the Results are
	// meaningless. The Limiter calls Take with one op for a request that
	// one policy applies to: implementations make that case fast.
	Take(ctx context.Context, ops []Op, out []Result) error
	// Refund gives back the Cost units of the admission a, exactly; when
	// that is impossible (its window has passed, its log entry has
	// expired, its units have drained from the bucket) it gives back
	// nothing, or, for the buckets, only the part of it provably still
	// held. It never takes the key below its fresh state and never lets
	// the key admit more than its Limit promises. Each admission may be
	// refunded once: the caller must not refund the same admission twice
	// (Limiter.Refund refunds a Decision at most once).
	//
	// a.Override zero: the admission was made on the Key's own state under
	// a.Limit, and is given back there (whether or not an override applies
	// now). Nonzero: it was made on that override's state under the
	// override's limit, and is given back there while that override is
	// still in force; once it has ended, been cleared or been replaced,
	// nothing is given back (its state is gone, and no unit ever moves to
	// another override's state or to the Key's own).
	Refund(ctx context.Context, a Admission) error
	// Reset forgets k's state under l: its next Take sees a fresh key.
	Reset(ctx context.Context, k Key, l Limit) error
	// SetOverride replaces k's limit, or blocks k, until o.Until (see
	// Override), where every user of the store sees it at once (with the
	// Redis store: in Redis, next to the key). An invalid Override is an
	// error wrapping ErrInvalidLimit (see storekit.ValidateOverride).
	//
	// A new override counts on a state of its own, fresh. Setting the
	// override already in force for k (the same Limit and Until) is a
	// no-op that keeps that state: many instances applying one rule set,
	// or one instance restarting, never reset what an override has
	// counted (the Redis store decides it atomically, in one script).
	// Another Limit or Until, or a clear in between, starts afresh. The
	// waits of a decision under an override or a block are the Key's as a
	// whole: its own state decides from o.Until on (see
	// docs/algorithms.md, "Waits").
	SetOverride(ctx context.Context, k Key, o Override) error
	// ClearOverride ends k's override or block, if any.
	ClearOverride(ctx context.Context, k Key) error
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

// opField is the path of field of op i of a group in a *FieldError:
// "ops[i].field", as every store names it.
func opField(i int, field string) string { return "ops[" + strconv.Itoa(i) + "]." + field }

// Take is one all-or-nothing decision of EachTaker.TakeEach: its ops, the
// memory of their Results (len(Out) must be len(Ops)), and, once decided,
// its error (nil: Out holds the Results).
type Take struct {
	Ops []Op
	Out []Result
	Err error
}

// EachTaker is a Store that decides many independent Takes in one call:
// the Redis store sends them in one pipeline to each server (one round
// trip), where as many calls of Take would each wait for its own answer.
// Limiter.CheckGroups uses it when its Store has it.
type EachTaker interface {
	// TakeEach decides each of takes as Take decides it alone, all or
	// nothing within it and whatever the others' outcome, and sets its
	// Err. The takes are decided in no particular order: two of one Key
	// are decided as two concurrent Takes would be.
	TakeEach(ctx context.Context, takes []Take)
}
