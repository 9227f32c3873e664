package algo_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/algo"
)

// TestHandover: the rule of the waits under an override or a block that
// ends in left µs (docs/algorithms.md, "Waits"), case by case, on a key
// whose own limit is 10 a minute (a token bucket: a unit every 6 s).
func TestHandover(t *testing.T) {
	sp := algo.MustCompile(core.PerMinute(10))
	T := sp.T             // the units of one request: 6 s
	S := 1_000_000 * sp.Q // the units of a second
	const left = 1_000_000
	block := core.Result{RetryAfter: time.Second, ResetAfter: time.Second, State: core.Throttled}
	for _, c := range []struct {
		name        string
		r           core.Result // under the override
		own         algo.Outcome
		retry, rest time.Duration
	}{
		{"a block, the own state fresh", block, algo.Outcome{Allowed: true}, time.Second, time.Second},
		{"a block, the own state drained", block, algo.Outcome{Retry: 5 * S, Reset: 50 * S}, 6 * time.Second, 51 * time.Second},
		{"a block, a cost above the own capacity", block, algo.Outcome{Retry: -1, Reset: 5 * S}, core.RetryNever, 6 * time.Second},
		{"denied until after the end", core.Result{RetryAfter: 3 * time.Second, ResetAfter: 9 * time.Second}, algo.Outcome{Allowed: true}, time.Second, time.Second},
		{"denied until exactly the end", core.Result{RetryAfter: time.Second, ResetAfter: time.Second}, algo.Outcome{Retry: T}, 7 * time.Second, time.Second},
		{"denied for a cost above the override's", core.Result{RetryAfter: core.RetryNever}, algo.Outcome{Retry: T}, 7 * time.Second, 0},
		{"denied, passing before the end", core.Result{RetryAfter: time.Second - time.Microsecond, ResetAfter: 2 * time.Second}, algo.Outcome{Retry: -1, Reset: T}, time.Second - time.Microsecond, 7 * time.Second},
		{"allowed, fresh before the end", core.Result{Allowed: true, ResetAfter: time.Second - time.Microsecond}, algo.Outcome{Reset: T}, 0, time.Second - time.Microsecond},
		{"a wait past what a Duration holds", block, algo.Outcome{Retry: algo.Micros(int64(core.RetryNever/time.Microsecond) - 1)}, core.RetryNever, time.Second},
	} {
		r := c.r
		sp.Handover(&r, left, &c.own)
		require.Equal(t, c.retry, r.RetryAfter, "%s: RetryAfter", c.name)
		require.Equal(t, c.rest, r.ResetAfter, "%s: ResetAfter", c.name)
		require.Equal(t, c.r.Allowed, r.Allowed, "%s: decided by the override", c.name)
	}
}
