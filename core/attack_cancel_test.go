//go:build go1.25

package core_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
)

// A holder that acts at its slot and then calls Cancel (a deferred Cancel,
// as one defers a context's cancel) must not get a second slot out of it:
// once a Reservation's slot has come, Cancel gives nothing back, as
// x/time/rate's. Before, it gave back the part of the slot not drained yet,
// so every act was followed by a free one: 8 acts of a 20/s bucket of
// burst 1 in ~200ms instead of 350ms. A Cancel before the slot still gives
// it back whole. (go1.25: testing/synctest's Test; the module itself
// needs only go1.24.)
func TestAttackCancelAfterActing(t *testing.T) {
	ctx := context.Background()
	for _, a := range []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.GCRA} {
		// In a bubble of testing/synctest: the holder waits for its slot
		// on the bubble's clock, acts at exactly the slot, and a Cancel
		// before it comes is not late however slow the machine is.
		t.Run(a.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lim := core.PerSecond(20).WithBurst(1).WithAlgorithm(a)
				l, err := core.NewLimiter(memStore(t), []core.Policy{{Name: "q", Key: ipKey(t), Limit: lim}})
				require.NoError(t, err)
				var adm []limitertest.Admission
				for range 8 {
					r, err := l.Reserve(ctx, "q", "a", time.Second)
					require.NoError(t, err)
					require.True(t, r.OK())
					time.Sleep(r.Delay())
					adm = append(adm, limitertest.Admission{At: r.Result().At, N: 1}) // act at the slot
					require.NoError(t, r.Cancel(ctx))
					require.NoError(t, r.Cancel(ctx))
				}
				require.NoError(t, limitertest.CheckPromise(lim, adm))
				require.GreaterOrEqual(t, adm[7].At-adm[0].At, int64(7*50_000), "8 acts of 20/s, burst 1")

				// Before its slot, a Cancel gives the slot back whole.
				r1, err := l.Reserve(ctx, "q", "b", time.Second)
				require.NoError(t, err)
				r2, err := l.Reserve(ctx, "q", "b", time.Second)
				require.NoError(t, err)
				require.Positive(t, r2.Delay())
				require.NoError(t, r2.Cancel(ctx))
				r3, err := l.Reserve(ctx, "q", "b", time.Second)
				require.NoError(t, err)
				require.Equal(t, r2.Result().At, r3.Result().At, "the cancelled slot is booked again")
				require.Zero(t, r1.Delay())
			})
		})
	}
}
