//go:build go1.25

package core_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
)

// Wait sleeps the exact wait; a deadline too short for it fails at once
// without counting; a cancel during the sleep ends it. In a bubble of
// testing/synctest (go1.25; the module itself needs only go1.24): the
// limiter, the store and the test share the bubble's clock, which moves
// only while every goroutine waits, so the waits are asserted to the
// nanosecond instead of within bounds a loaded machine overran.
func TestWaitSleepsExactlyAndHonoursDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		l, err := core.NewLimiter(memStore(t), []core.Policy{{Name: "p", Key: ipKey(t), Limit: core.PerSecond(10).WithBurst(1)}})
		require.NoError(t, err)
		_, err = l.Wait(ctx, "p", "k")
		require.NoError(t, err)

		short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		defer cancel()
		start := time.Now()
		r, err := l.Wait(short, "p", "k")
		require.ErrorIs(t, err, core.ErrWouldExceedDeadline)
		require.False(t, errors.Is(err, context.DeadlineExceeded))
		require.Zero(t, time.Since(start), "the deadline failure is immediate")
		require.False(t, r.Allowed)

		start = time.Now()
		r, err = l.Wait(ctx, "p", "k")
		require.NoError(t, err)
		require.True(t, r.Allowed)
		require.Equal(t, 100*time.Millisecond, time.Since(start), "the wait for the next 100ms slot (the failed wait did not count)")

		// Book the next 5 slots, then cancel a Wait for the one after
		// them during its sleep.
		var last int64
		for range 5 {
			rv, err := l.Reserve(ctx, "p", "k", 2*time.Second)
			require.NoError(t, err)
			last = rv.Result().At
		}
		cctx, ccancel := context.WithCancel(ctx)
		time.AfterFunc(20*time.Millisecond, ccancel)
		start = time.Now()
		_, err = l.Wait(cctx, "p", "k")
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, 20*time.Millisecond, time.Since(start), "the cancel ends the sleep")
		// The cancelled Wait gave back the slot it had booked (last +
		// 100ms): the next booking gets it, not the one after it.
		next, err := l.Reserve(ctx, "p", "k", 2*time.Second)
		require.NoError(t, err)
		require.Equal(t, last+100_000, next.Result().At, "a cancelled Wait must not have counted")
	})
}
