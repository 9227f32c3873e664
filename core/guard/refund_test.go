package guard_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/limitertest"
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
