package engine

import (
	"fmt"
	"log/slog"
	"time"
)

// Option configures an Engine.
type Option func(*config)

type config struct {
	idemTTL     time.Duration
	idemRepeats int64
	maxSkew     time.Duration
	observers   []Observer
	log         *slog.Logger
	now         func() time.Time
	parallel    int
}

// WithIdempotency sets how long an admitted check with an idempotency key
// is remembered (ttl, default 5 minutes: at least 1s, whole microseconds)
// and how many repeats of it within ttl are free (maxRepeats, default 3, at
// most 1000); later repeats are counted like any check. Zero keeps a
// default.
func WithIdempotency(ttl time.Duration, maxRepeats int64) Option {
	return func(c *config) {
		if ttl != 0 {
			c.idemTTL = ttl
		}
		if maxRepeats != 0 {
			c.idemRepeats = maxRepeats
		}
	}
}

// WithMaxClientSkew bounds how far a check's ClientTime may be from the
// engine's clock (default 24 hours): a ClientTime further off is invalid
// input. The client's time is never the clock a decision is made on.
func WithMaxClientSkew(d time.Duration) Option { return func(c *config) { c.maxSkew = d } }

// WithObserver adds an Observer of every decision and rules reload (the
// service's metrics). Observers run in order, in the calling goroutine.
func WithObserver(o Observer) Option {
	return func(c *config) {
		if o != nil {
			c.observers = append(c.observers, o)
		}
	}
}

// WithBatchParallelism above 1 makes CheckBatch decide a batch's checks in
// rounds, each of the next check of every caller (dimension and
// identifier), the checks of a round at once in one call of the limiter
// (core.Limiter.CheckGroups), and those with an idempotency key on up to n
// goroutines beside it (default 1: one check after the other, in order, on
// the caller's goroutine); one caller's checks are always decided in
// request order. Over the Redis store a round costs one round trip (a
// batch of distinct callers, one in all) instead of one per check; over
// the memory store, keep 1. n below 1 is an error.
func WithBatchParallelism(n int) Option { return func(c *config) { c.parallel = n } }

// WithClock sets the engine's clock (default time.Now): which overrides
// of the rules are in force when a snapshot is put in force, the windows
// of Deny rules, and how far a check's ClientTime is off. The store keeps
// its own clock (give both the same one in tests). now must not be nil.
func WithClock(now func() time.Time) Option {
	return func(c *config) {
		if now != nil {
			c.now = now
		}
	}
}

// WithLogger sets the logger of rules reloads (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

func newConfig(opts []Option) (config, error) {
	c := config{idemTTL: 5 * time.Minute, idemRepeats: 3, maxSkew: 24 * time.Hour, now: time.Now, parallel: 1}
	for _, o := range opts {
		o(&c)
	}
	if c.maxSkew <= 0 {
		return c, fmt.Errorf("engine: WithMaxClientSkew: must be positive, got %s", c.maxSkew)
	}
	if c.parallel < 1 {
		return c, fmt.Errorf("engine: WithBatchParallelism: must be at least 1, got %d", c.parallel)
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	return c, nil
}
