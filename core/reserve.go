package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrCannotReserve means a Reserve named a policy whose algorithm cannot
// book a slot ahead: only the buckets can (TokenBucket, LeakyBucket, GCRA).
// A window counts whole windows and has no instant to book into.
var ErrCannotReserve = errors.New("sluice: only a bucket algorithm (token bucket, leaky bucket, GCRA) can reserve")

// Reserve books the next slot for one event of identity under the named
// policy. It is ReserveN with n 1.
func (l *Limiter) Reserve(ctx context.Context, policy, identity string, maxDelay time.Duration) (*Reservation, error) {
	return l.ReserveN(ctx, policy, identity, 1, maxDelay)
}

// ReserveN books the next slot for n events of identity under the named
// policy, at most maxDelay ahead: the leaky bucket used as a queue. Like
// x/time/rate's ReserveN, it does not wait: the Reservation says whether a
// slot was booked (OK) and how long to wait for it (Delay); act then, or
// Cancel.
//
// The booking is one atomic store step (one script on Redis): the n events
// are counted now, as admitted at the slot, the earliest instant at which
// the policy's bucket admits them; every instance sharing the store sees
// them at once. Slots are handed out in the order the bookings reach the
// store, so callers that act at their slot are served first come, first
// served, and the limit is never exceeded at the instants the slots are
// recorded at (PolicyResult.At). A slot further than maxDelay away is not
// booked: the Reservation is not OK, nothing is counted, and its Result's
// RetryAfter is the wait an AllowN of n needs. maxDelay 0 books only what
// AllowN would admit now; a store books at most algo.Spec.MaxDelay ahead
// (centuries for common limits), whatever maxDelay says.
//
// Only a bucket policy can reserve: a window policy is an error wrapping
// ErrCannotReserve. An override of the identity applies as for AllowN (an
// override whose limit is a window admits now or not at all), to slots
// before it ends only: a slot after it would be admitted under the
// policy's own limit, so none is booked there. Errors are
// AllowN's, and a negative maxDelay. The store call runs detached from
// ctx's cancellation, as AllowN's. A shadow policy does not shape, as in
// WaitN: nothing is booked ahead, the events are taken now as AllowN takes
// them, and the Reservation is OK with no Delay even when the policy would
// have denied them (its Result's ShadowDenied says so; nothing was
// counted then). Under a guard (package core/guard), a
// Reservation its failure policy answered says so in Result().Source: one
// failed open is OK at once, and nothing was booked in the shared limit.
func (l *Limiter) ReserveN(ctx context.Context, policy, identity string, n int64, maxDelay time.Duration) (*Reservation, error) {
	p, err := l.keyPolicy("ReserveN", policy, identity, n)
	if err != nil {
		return nil, err
	}
	if maxDelay < 0 {
		return nil, fmt.Errorf("sluice: ReserveN: %w", invalidField(ErrInvalidCost, "maxDelay", "must be >= 0, got %s", maxDelay))
	}
	if !p.Limit.Algorithm.Bucket() {
		return nil, fmt.Errorf("sluice: ReserveN: policy %q (%s): %w", p.Name, p.Limit.Algorithm, ErrCannotReserve)
	}
	if p.Shadow {
		maxDelay = 0 // on trial: report, never make the caller wait
	}
	return l.reserve(ctx, p, identity, n, maxDelay)
}

// reserve books n units of identity under p within maxDelay.
func (l *Limiter) reserve(ctx context.Context, p *compiledPolicy, identity string, n int64, maxDelay time.Duration) (*Reservation, error) {
	pr, err := l.allowN(ctx, p, identity, n, maxDelay)
	if err != nil {
		return nil, err
	}
	r := &Reservation{l: l, pr: pr}
	if pr.Allowed {
		r.act = time.Now().Add(pr.RetryAfter)
	}
	return r, nil
}

// A Reservation is a slot booked by Limiter.ReserveN: n events counted now,
// to be acted on at the slot, or given back with Cancel. Its methods are
// safe for concurrent use.
type Reservation struct {
	l   *Limiter
	pr  PolicyResult
	act time.Time // the slot on the local clock: the reply's arrival plus the wait

	mu   sync.Mutex
	done bool // canceled
}

// OK reports whether a slot was booked (within the maxDelay asked for), or
// the policy is a shadow one, which never refuses.
func (r *Reservation) OK() bool { return r.pr.Allowed || r.pr.Shadow }

// Delay is how long the holder must wait from now before acting: zero once
// the slot has come, and RetryNever when nothing was booked (see Result for
// the wait an AllowN would need). The wait is measured on the local clock
// from the moment the store's answer arrived, so it ends at or after the
// slot on the store's clock.
func (r *Reservation) Delay() time.Duration { return r.DelayFrom(time.Now()) }

// DelayFrom is Delay measured from t.
func (r *Reservation) DelayFrom(t time.Time) time.Duration {
	switch {
	case r.pr.Allowed:
		return max(r.act.Sub(t), 0)
	case r.pr.Shadow:
		return 0 // a shadow policy's denial is reported, never waited for
	}
	return RetryNever
}

// Result returns the store's answer to the booking: the policy, the limit
// applied, and a Result whose RetryAfter is the wait until the slot when
// booked (the wait an AllowN needs when not), whose At is the slot on the
// store's clock (µs), and whose Remaining is zero while bookings queue.
func (r *Reservation) Result() PolicyResult { return r.pr }

// Cancel gives the slot back: the holder will not act on it. Before the
// slot, the store gives back as much of it as is provably safe (see
// docs/algorithms.md, "Booking"): all of it while nothing was booked behind
// it, less what later bookings rest on. Once the slot has come (Delay is
// zero, on the local clock: at once for a slot booked now), Cancel gives
// nothing back, as x/time/rate's: the holder may have acted on it, and a
// Cancel deferred past the act would otherwise free a second slot. A
// Reservation is given back at most once: later calls, and a Cancel of a
// Reservation that is not OK, do nothing. The store call runs detached from
// ctx's cancellation (bounded by WithStoreTimeout); an error means the
// store failed, and the slot stays counted.
func (r *Reservation) Cancel(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return nil
	}
	if r.pr.Allowed && !time.Now().Before(r.act) {
		r.done = true // the slot has come: it is the holder's
		return nil
	}
	if err := r.l.cancel(ctx, &r.pr); err != nil {
		return err
	}
	r.done = true
	return nil
}

// cancel gives back the admission of p, a key-level take or booking, if it
// counted anything.
func (l *Limiter) cancel(ctx context.Context, p *PolicyResult) error {
	a, ok := p.admission()
	if !ok {
		return nil // nothing counted that the store can name
	}
	ctx, cancel := l.detached(ctx)
	defer cancel()
	if err := l.store.Refund(ctx, a); err != nil {
		return fmt.Errorf("sluice: policy %q: cancel: %w", p.Policy, err)
	}
	return nil
}
