package lease_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/lease"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/keyfunc"
)

// Requests under a leased global limit and an exact per-user one, from
// three instances on one manual clock: each is counted by both policies or
// by neither. A user's count in the store is exactly what was admitted of
// theirs (a request the global limit refused took nothing of the user's,
// or gave it back), and neither policy ever admits over its limit.
func TestGroupsAllOrNothing(t *testing.T) {
	clock := limitertest.NewClock()
	mem := newMemory(t, clock.Now)
	global := core.Per(40, time.Second).WithAlgorithm(core.FixedWindow)
	perUser := core.Per(4, time.Second).WithAlgorithm(core.FixedWindow)
	policies := []core.Policy{
		{Name: "global", Key: keyfunc.Const("all"), Limit: global, Lease: 200 * time.Millisecond},
		{Name: "user", Key: keyfunc.Header("U"), Limit: perUser},
	}
	var lims []*core.Limiter
	for range 3 {
		lim, err := core.NewLimiter(newLease(t, mem, lease.WithClock(clock.Now), lease.WithSweepInterval(time.Hour)), policies)
		require.NoError(t, err)
		lims = append(lims, lim)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	ctx := context.Background()
	globalRef := newReference(t, global)
	userRef := map[string]*reference{}
	admitted := map[string]int64{} // per user, in the current window
	window := int64(-1)
	for step := range 4000 {
		if rng.IntN(20) == 0 {
			clock.Advance(time.Duration(rng.Int64N(int64(200 * time.Millisecond))))
		}
		now := clock.Now().UnixMicro()
		if w := now / int64(time.Second/time.Microsecond); w != window {
			window, admitted = w, map[string]int64{}
		}
		user := fmt.Sprint("u", rng.IntN(16))
		d, err := lims[rng.IntN(3)].Check(ctx, keyfunc.Static{Headers: map[string][]string{"U": {user}}})
		require.NoError(t, err)
		if d.Allowed {
			globalRef.admit(now, 1, "global")
			if userRef[user] == nil {
				userRef[user] = newReference(t, perUser)
			}
			userRef[user].admit(now, 1, "user "+user)
			admitted[user]++
		}
		r, err := limitertest.TakeOne(ctx, mem, core.Key{Identity: user, Policy: "user"}, perUser, 0)
		require.NoError(t, err)
		require.Equal(t, 4-admitted[user], r.Remaining, "step %d: user %s's count in the store", step, user)
	}
}
