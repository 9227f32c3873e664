package guard_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/keyfunc"
)

// A decision made by a failure policy names no admission of the shared
// store (Result.At is 0), so refunding it later gives nothing back there:
// the local fallback's instants must not undo another request's admission.
func TestDegradedResultsNameNoAdmission(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []struct {
		name string
		opt  guard.Option
	}{{"fallback", guard.WithFallback(1)}, {"open", guard.WithFailOpen()}} {
		t.Run(mode.name, func(t *testing.T) {
			clk := limitertest.NewClock()
			b := newBackend(t, clk)
			g := newGuard(t, b, guard.WithClock(clk.Now), mode.opt)
			lim := core.PerMinute(2).WithAlgorithm(core.FixedWindow)
			first, err := takeID(ctx, g, "k", lim, 1)
			require.NoError(t, err)
			require.Equal(t, clk.Now().UnixMicro(), first.At)
			b.failWith(errors.New("down"))
			r, err := takeID(ctx, g, "k", lim, 1)
			require.NoError(t, err)
			require.True(t, r.Source.Degraded())
			require.Zero(t, r.At)
			out := make([]core.Result, 2)
			require.NoError(t, g.Take(ctx, []core.Op{{Key: key("k"), Limit: lim, Cost: 1}, {Key: key("k2"), Limit: lim, Cost: 1}}, out))
			require.True(t, out[0].Source.Degraded())
			require.Zero(t, out[0].At)
			b.failWith(nil)
			// the backend's own record: refunding at 0 gives nothing back
			require.NoError(t, b.Store.Refund(ctx, core.Admission{Key: key("k"), Limit: lim, Cost: 1, At: r.At}))
			peek, err := takeID(ctx, b.Store, "k", lim, 0)
			require.NoError(t, err)
			require.Equal(t, int64(1), peek.Remaining)
		})
	}
}

// A Decision a failure policy answered counted nothing in the shared store,
// so refunding it after the response costs no backend call (it would give
// nothing back there anyway): the refund of an outage is free.
func TestDegradedDecisionRefundCallsNoBackend(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []struct {
		name string
		opt  guard.Option
	}{{"fallback", guard.WithFallback(1)}, {"open", guard.WithFailOpen()}} {
		t.Run(mode.name, func(t *testing.T) {
			clk := limitertest.NewClock()
			b := newBackend(t, clk)
			g := newGuard(t, b, guard.WithClock(clk.Now), mode.opt)
			l, err := core.NewLimiter(g, []core.Policy{{Name: "p", Key: keyfunc.Const("k"), Limit: core.PerMinute(2), Refund: core.RefundFailed}})
			require.NoError(t, err)
			b.failWith(errors.New("down"))
			d, err := l.Check(ctx, keyfunc.Static{})
			require.NoError(t, err)
			require.True(t, d.Allowed)
			require.True(t, d.Results[0].Source.Degraded())
			b.failWith(nil)
			calls := b.calls.Load()
			require.NoError(t, l.Refund(ctx, &d, 500))
			require.Equal(t, calls, b.calls.Load(), "a degraded admission's refund reached the backend")
		})
	}
}
