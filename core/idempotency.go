package core

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/keyfunc"
)

// Idempotency counts retries of one request once.
type Idempotency struct {
	// Header carries the idempotency key (default "X-Idempotency-Key").
	Header string
	// TTL is how long a key is remembered after its first admission
	// (default 5 minutes).
	TTL time.Duration
	// MaxRepeats is how many repeats are free (default 3); later ones are
	// counted like any request, so the header cannot bypass a limit.
	MaxRepeats int64
}

// WithIdempotency makes requests that repeat an admitted request of the same
// identity (same idempotency key, within the TTL) free, up to MaxRepeats.
// An idempotent request costs up to two more store calls.
func WithIdempotency(i Idempotency) LimiterOption {
	if i.Header == "" {
		i.Header = "X-Idempotency-Key"
	}
	if i.TTL <= 0 {
		i.TTL = 5 * time.Minute
	}
	if i.MaxRepeats <= 0 {
		i.MaxRepeats = 3
	}
	return func(c *limiterConfig) { c.idem = &i }
}

// idempotent decides a request that carries an idempotency key. The key's
// record is an exact sliding log of 1+MaxRepeats events per TTL, written
// only when a request is admitted: a record with room left means an
// admitted original, so this repeat passes uncounted (Peek's Decision).
// Concurrent first attempts may both be counted: never fewer counts than
// requests admitted, so never a bypass.
func (l *Limiter) idempotent(ctx context.Context, r keyfunc.Request, c Call, cost int64, d *Decision, value string) error {
	i := l.cfg.idem
	rec := Limit{Algorithm: SlidingWindowLog, Rate: 1 + i.MaxRepeats, Period: i.TTL}
	if err := rec.Validate(); err != nil {
		return fmt.Errorf("sluice: WithIdempotency: %w", err)
	}
	// The identity: the first matching policy's.
	if err := l.decide(ctx, r, c.Key, 0, d); err != nil || len(d.Results) == 0 {
		return err
	}
	key := "idem:" + value + "\x00" + d.Results[0].storeKey()
	seen, err := l.store.Take(ctx, key, rec, 0)
	if err != nil {
		return fmt.Errorf("sluice: idempotency: %w", err)
	}
	fresh := seen.Remaining == rec.Rate
	if !fresh && seen.Remaining > 0 { // a repeat of an admitted request, with repeats left
		if _, err := l.store.Take(ctx, key, rec, 1); err != nil {
			return fmt.Errorf("sluice: idempotency: %w", err)
		}
		d.Allowed = true
		for j := range d.Results {
			d.Results[j].Allowed, d.Results[j].RetryAfter = true, 0
			d.Results[j].cost = 0 // nothing to refund
		}
		d.Repeat = true
		return nil
	}
	if err := l.decide(ctx, r, c.Key, cost, d); err != nil {
		return err
	}
	if fresh && d.Allowed {
		if _, err := l.store.Take(ctx, key, rec, 1); err != nil {
			return fmt.Errorf("sluice: idempotency: %w", err)
		}
	}
	return nil
}
