package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// A refund gives back the units of the request it refers to, once: a
// fixed-window refund of a request of the previous window frees nothing in
// the current one (issue 12, item 9: three admissions in a window of two),
// and refunding a Decision again gives nothing more, for every algorithm.
func TestLimiterRefundUndoesOnlyItsRequestOnce(t *testing.T) {
	ctx := context.Background()
	req := &keyfunc.Static{Remote: "192.0.2.1:1"}
	newLimiter := func(t *testing.T, clock *limitertest.Clock, lim core.Limit) *core.Limiter {
		s, err := memorystore.New(memorystore.WithClock(clock.Now))
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		l, err := core.NewLimiter(s, []core.Policy{{Name: "p", Key: keyfunc.Const("all"), Limit: lim, Refund: core.RefundFailed}})
		require.NoError(t, err)
		return l
	}
	check := func(t *testing.T, l *core.Limiter) core.Decision {
		t.Helper()
		d, err := l.Check(ctx, req)
		require.NoError(t, err)
		return d
	}

	t.Run("previous-window", func(t *testing.T) {
		clock := limitertest.NewClock()
		l := newLimiter(t, clock, core.Per(2, time.Second).WithAlgorithm(core.FixedWindow))
		clock.Advance(900 * time.Millisecond)
		old := check(t, l)
		clock.Advance(200 * time.Millisecond)
		require.True(t, old.Allowed && check(t, l).Allowed && check(t, l).Allowed)
		require.NoError(t, l.Refund(ctx, &old, 500))
		require.False(t, check(t, l).Allowed, "a refund of the previous window's request freed room in this one")
	})

	for _, a := range limitertest.Algorithms {
		t.Run(a.String()+"/twice", func(t *testing.T) {
			clock := limitertest.NewClock()
			lim := core.PerMinute(4).WithAlgorithm(a)
			l := newLimiter(t, clock, lim)
			first, second := check(t, l), check(t, l)
			require.True(t, first.Allowed && second.Allowed)
			require.True(t, first.Refundable())
			require.NoError(t, l.Refund(ctx, &first, 200), "a success is not refunded")
			require.NoError(t, l.Refund(ctx, &first, 503))
			require.False(t, first.Refundable(), "a refunded Decision has nothing more to give")
			for range 3 {
				require.NoError(t, l.Refund(ctx, &first, 503))
			}
			peek, err := l.Peek(ctx, req)
			require.NoError(t, err)
			require.Equal(t, int64(3), peek.Results[0].Remaining, "one request left counted, whatever the number of refunds")
		})
	}
}
