package core

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Errors of the key-level API (Allow, Wait and their N forms).
var (
	// ErrWouldExceedDeadline means a Wait gave up at once because the
	// wait it needs ends after its context's deadline: nothing was counted.
	ErrWouldExceedDeadline = errors.New("sluice: wait would exceed context deadline")
	// ErrExceedsCapacity means a Wait asked for more units than the
	// identity's limit admits at once: no wait would ever admit it.
	ErrExceedsCapacity = errors.New("sluice: cost exceeds the limit's capacity")
)

// Allow decides one event of identity under the named policy, outside any
// request: a job, a queue consumer, an outbound client. It is AllowN with n 1.
func (l *Limiter) Allow(ctx context.Context, policy, identity string) (PolicyResult, error) {
	return l.AllowN(ctx, policy, identity, 1)
}

// AllowN decides n events of identity under the named policy at once: all
// are admitted, and counted, or none is. identity is what the policy's Key
// would return for a request of that caller, and the state is the one the
// middleware uses for it (same store, same key), so the two views share
// one limit. n 0 peeks: it reports whether one event would be admitted now
// and counts nothing.
//
// The policy's Limit applies (its Tiers do not: a key-level call has no
// tier, so the state of an identity that requests also reach under a tier's
// limit is read under two limits: use a policy without Tiers for it), and
// so do the identity's override or block (see SetOverride), applied by the
// store; the Result's Limit names the limit applied. Under a guard (package
// core/guard) a degraded Result (see Source) is returned as its failure
// policy answered. The
// policy's Match does not apply: the caller chose the policy. A shadow
// policy's denial is reported as it is (Allowed false, ShadowDenied true):
// the caller decides what a trial means for it. Hooks and the Observer
// are not called (they describe requests).
//
// Like a request's decision, the store call runs detached from ctx's
// cancellation (bounded by WithStoreTimeout), so an event is counted or
// refused, never half-decided. An unknown policy, an empty identity
// (ErrNoKey), a negative n (ErrInvalidCost) or a store failure is an error.
func (l *Limiter) AllowN(ctx context.Context, policy, identity string, n int64) (PolicyResult, error) {
	p, err := l.keyPolicy("AllowN", policy, identity, n)
	if err != nil {
		return PolicyResult{}, err
	}
	return l.allowN(ctx, p, identity, n, 0)
}

// keyPolicy finds the named policy and checks the arguments of a
// key-level call.
func (l *Limiter) keyPolicy(fn, policy, identity string, n int64) (*compiledPolicy, error) {
	if identity == "" {
		return nil, fmt.Errorf("sluice: %s: %w", fn, invalidField(ErrNoKey, "identity", "empty key"))
	}
	if n < 0 {
		return nil, fmt.Errorf("sluice: %s: %w", fn, invalidField(ErrInvalidCost, "n", "must not be negative, got %d", n))
	}
	set := l.set.Load()
	for i := range set.policies {
		if p := &set.policies[i]; p.Name == policy {
			return p, nil
		}
	}
	return nil, fmt.Errorf("sluice: %s: no policy %q", fn, policy)
}

// scratch is the op and result of one take: pooled, so that an AllowN
// allocates nothing and a Decision need not hold its op (a slice passed to
// the Store escapes).
type scratch struct {
	op  [1]Op
	res [1]Result
}

// allowN makes one take of n units of identity under p, or, with maxDelay
// positive, a booking within maxDelay (see Op.MaxDelay).
func (l *Limiter) allowN(ctx context.Context, p *compiledPolicy, identity string, n int64, maxDelay time.Duration) (PolicyResult, error) {
	ctx, cancel := l.detached(ctx)
	defer cancel()
	pr := PolicyResult{Policy: p.Name, Limit: p.Limit, Shadow: p.Shadow, refund: p.Refund, id: identity, cost: n, lease: p.Lease}
	sc, _ := l.scratch.Get().(*scratch)
	if sc == nil {
		sc = new(scratch)
	}
	sc.op[0] = pr.op()
	sc.op[0].MaxDelay = maxDelay
	err := l.store.Take(ctx, sc.op[:], sc.res[:])
	pr.Result = sc.res[0]
	*sc = scratch{} // keeps no identity
	l.scratch.Put(sc)
	if err != nil {
		return PolicyResult{}, fmt.Errorf("sluice: policy %q: %w", p.Name, err)
	}
	pr.settle()
	if !pr.Allowed {
		pr.cost = 0
	}
	return pr, nil
}

// Wait waits until one event of identity is admitted under the named
// policy, and counts it. It is WaitN with n 1.
func (l *Limiter) Wait(ctx context.Context, policy, identity string) (PolicyResult, error) {
	return l.WaitN(ctx, policy, identity, 1)
}

// WaitN shapes traffic instead of rejecting it: it blocks until n events of
// identity are admitted under the named policy (counted as AllowN counts
// them) and returns the admission's result. It never lets more through
// than the limit promises, across every instance that shares the store.
//
// On a bucket policy (TokenBucket, LeakyBucket, GCRA) a wait is a booking
// (see ReserveN): one atomic store step books the next slot, at most until
// ctx's deadline, and WaitN sleeps exactly until it. Waiters are served in
// the order their bookings reached the store, on every instance alike: a
// queue, with no waiter overtaken. If ctx ends while it sleeps, the slot is
// given back (as Reservation.Cancel) and ctx's error returned. The Result
// returned is the admission's at its slot: At is the slot, RetryAfter zero.
//
// On a window policy, and when the store cannot decide (a guard's failure
// policy answered: fail closed), each attempt is one atomic take, and a denied
// attempt sleeps the exact RetryAfter the store reported before trying
// again; waiters are then not queued: when a slot frees, whichever waiter
// takes it first gets it, and one asking for a large n may starve behind
// a stream of small ones.
//
// Like x/time/rate's WaitN, it returns at once, without counting anything,
// an error wrapping ErrWouldExceedDeadline when the wait needed ends after
// ctx's deadline, and one wrapping ErrExceedsCapacity when n exceeds the
// capacity of the limit applied (no wait admits it); it returns ctx's
// error when ctx ends while it sleeps. A shadow policy does not shape: it
// takes, and a denial on trial returns at once, as AllowN reports it, with
// no error.
func (l *Limiter) WaitN(ctx context.Context, policy, identity string, n int64) (PolicyResult, error) {
	p, err := l.keyPolicy("WaitN", policy, identity, n)
	if err != nil {
		return PolicyResult{}, err
	}
	book := p.Limit.Algorithm.Bucket() && !p.Shadow
	w := waiter{ctx: ctx}
	defer w.stop()
	for {
		if err := ctx.Err(); err != nil {
			return PolicyResult{}, err
		}
		var maxDelay time.Duration
		if book {
			maxDelay = RetryNever // as far as the store books
			if dl, ok := ctx.Deadline(); ok {
				maxDelay = time.Until(dl)
			}
		}
		pr, err := l.allowN(ctx, p, identity, n, max(maxDelay, 0))
		if err != nil || pr.Shadow && !pr.Allowed {
			return pr, err
		}
		if pr.Allowed {
			return l.awaitSlot(ctx, &w, pr)
		}
		if pr.Never() {
			return pr, fmt.Errorf("sluice: WaitN(n=%d): policy %q: %w %d", n, p.Name, nested{ErrExceedsCapacity}, pr.Result.Capacity)
		}
		wait := pr.RetryAfter
		if wait <= 0 { // a store never says so when it denies; do not spin
			wait = time.Microsecond
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			return pr, fmt.Errorf("sluice: WaitN(n=%d): policy %q: %w (needs %s)", n, p.Name, nested{ErrWouldExceedDeadline}, wait)
		}
		if !w.sleep(wait) {
			return PolicyResult{}, ctx.Err()
		}
	}
}

// awaitSlot returns pr, admitted, once its slot has come: at once, or
// after sleeping on w until it when it was booked ahead. If ctx ends
// first, the slot is given back and ctx's error returned.
func (l *Limiter) awaitSlot(ctx context.Context, w *waiter, pr PolicyResult) (PolicyResult, error) {
	if pr.RetryAfter > 0 { // booked: sleep until the slot
		if !w.sleep(pr.RetryAfter) {
			if err := l.cancel(ctx, &pr); err != nil {
				return PolicyResult{}, errors.Join(ctx.Err(), err)
			}
			return PolicyResult{}, ctx.Err()
		}
		pr.RetryAfter = 0
	}
	return pr, nil
}

// waiter sleeps the waits of one WaitN on one timer, made on the first.
type waiter struct {
	ctx   context.Context
	timer *time.Timer
}

// sleep sleeps for d; false when ctx ended first.
func (w *waiter) sleep(d time.Duration) bool {
	if w.timer == nil {
		w.timer = time.NewTimer(d)
	} else {
		w.timer.Reset(d)
	}
	select {
	case <-w.timer.C:
		return true
	case <-w.ctx.Done():
		return false
	}
}

// stop stops w's timer, if it made one.
func (w *waiter) stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
}
