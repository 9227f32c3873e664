package engine_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/service/engine"
)

// TestAlgorithms checks every algorithm on every store: a rule of 5 per
// minute admits exactly 5 units, reports them used, warns above 80% and
// denies the sixth with a RetryAfter, and a peek counts nothing.
func TestAlgorithms(t *testing.T) {
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			for _, a := range limitertest.Algorithms {
				t.Run(a.String(), func(t *testing.T) {
					e := newEngine(t, newStore(t), fmt.Sprintf(`
rules:
  - name: r
    dimension: user
    algorithm: %s
    rate: 5
    period: 1m
`, a))
					c := engine.Check{Dimension: "user", Identifier: "u-" + a.String(), Endpoint: "/x", Cost: 1}
					for i := int64(1); i <= 5; i++ {
						r := mustCheck(t, e, c)
						require.True(t, r.Allowed, "check %d", i)
						require.Equal(t, "r", r.Rule)
						require.EqualValues(t, 5, r.Limit)
						require.EqualValues(t, 5-i, r.Remaining)
						require.EqualValues(t, i, r.Used)
						if i == 5 {
							require.Equal(t, core.Warning, r.State)
						}
						require.True(t, r.ResetAt.After(time.Now().Add(-time.Second)))
					}
					peek := c
					peek.Cost = 0
					r := mustCheck(t, e, peek)
					require.False(t, r.Allowed, "a peek of a spent limit")
					require.EqualValues(t, 0, r.Remaining)
					r = mustCheck(t, e, c)
					require.False(t, r.Allowed)
					require.Equal(t, core.Throttled, r.State)
					require.Positive(t, r.RetryAfter)
					// At most two windows: a sliding window counter still
					// weighs the spent window in the next one.
					require.LessOrEqual(t, r.RetryAfter, 2*time.Minute)
				})
			}
		})
	}
}

// TestConcurrentChecksNeverOverAdmit checks, on a still clock, that many
// goroutines checking one identity under two rules, single and in
// all-or-nothing batches, are admitted exactly the tighter limit, never
// more.
func TestConcurrentChecksNeverOverAdmit(t *testing.T) {
	clock := &fixedClock{now: time.Now()} // near the real clock: Redis expires keys on its own
	srv := redistest.StartServer(t)
	for name, store := range map[string]func(t *testing.T) core.Store{
		"memory": func(t *testing.T) core.Store {
			s, err := memorystore.New(memorystore.WithClock(clock.Now))
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			return s
		},
		"redis": func(t *testing.T) core.Store { return redisStore(t, srv.Addr, redisstore.WithClock(clock.Now)) },
	} {
		t.Run(name, func(t *testing.T) {
			for _, a := range limitertest.Algorithms {
				t.Run(a.String(), func(t *testing.T) {
					e := newEngine(t, store(t), fmt.Sprintf(`
rules:
  - name: tight
    dimension: user
    endpoints: [/api/**]
    algorithm: %s
    rate: 37
    period: 1h
  - name: loose
    dimension: user
    algorithm: %[1]s
    rate: 1000
    period: 1h
`, a))
					const workers, each = 8, 12
					var admitted atomic.Int64
					var wg sync.WaitGroup
					for w := range workers {
						wg.Go(func() {
							c := engine.Check{Dimension: "user", Identifier: "u", Endpoint: "/api/x", Cost: 1}
							for i := range each {
								if (w+i)%3 == 0 { // a batch of two checks, all or nothing
									rs, errs := e.CheckBatch(context.Background(), []engine.Check{c, c}, true)
									require.NoError(t, errs[0])
									require.NoError(t, errs[1])
									require.Equal(t, rs[0].Allowed, rs[1].Allowed)
									if rs[0].Allowed {
										admitted.Add(2)
									}
									continue
								}
								r, err := e.Check(context.Background(), c)
								require.NoError(t, err)
								if r.Allowed {
									admitted.Add(1)
								}
							}
						})
					}
					wg.Wait()
					require.LessOrEqual(t, admitted.Load(), int64(37), "over-admitted")
					require.GreaterOrEqual(t, admitted.Load(), int64(36), "a batch of two may find one unit left, no fewer")
					r := mustCheck(t, e, engine.Check{Dimension: "user", Identifier: "u", Endpoint: "/api/x"})
					require.EqualValues(t, 37-admitted.Load(), r.Remaining)
					var loose core.PolicyResult
					for _, p := range r.Decision.Results {
						if p.Policy == "loose" {
							loose = p
						}
					}
					require.EqualValues(t, 1000-admitted.Load(), loose.Remaining, "a denial consumed from the other rule")
				})
			}
		})
	}
}
