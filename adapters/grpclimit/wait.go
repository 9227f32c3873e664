package grpclimit

import (
	"time"

	"github.com/sluicehq/sluice/core"
)

// WithWait makes the client interceptors shape outgoing calls instead of
// failing them: a denied call (or, with WithMessageLimit, a denied message
// of a client stream) sleeps the exact RetryAfter of its binding policy and
// is decided again, as core.Limiter.WaitN does, until it is admitted. It
// fails as without WithWait (DeniedError, or the WithDeniedHandler error)
// at once when the wait would end after the call's deadline or the cost
// exceeds the capacity, and with the context's status (Canceled,
// DeadlineExceeded) when the call's context ends while it sleeps. Each
// attempt is one atomic decision, so waiting never admits more than the
// limit; waiters are not queued (see core.Limiter.WaitN on fairness).
// Server interceptors ignore it.
func WithWait() Option { return func(c *config) { c.wait = true } }

// await decides r again into d after each RetryAfter until it is
// admitted, or leaves its last denial in d when the next wait would pass
// the deadline. A non-nil error ends the call (an undecided attempt, or
// the context's end).
func (c *config) await(lim *core.Limiter, r *call, req any, d *core.Decision) error {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	ctx := r.parent
	for !d.Allowed {
		b := d.Bound()
		wait := b.RetryAfter
		if b.Never() {
			return nil
		}
		if wait <= 0 {
			wait = time.Microsecond
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			return nil
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-timer.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := c.check(lim, r, req, d); err != nil {
			return err
		}
	}
	return nil
}
