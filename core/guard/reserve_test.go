package guard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/keyfunc"
)

// Behind a guard a booking reaches the backend: the deny cache, which
// repeats a take's denial, never answers one (the slot may be within its
// bound); a take after it is still answered from the cache. A backend that
// fails answers a booking by the failure policy (fail closed: not booked).
func TestGuardBooksPastTheDenyCache(t *testing.T) {
	ctx := context.Background()
	clock := limitertest.NewClock()
	backend := newBackend(t, clock)
	g := newGuard(t, backend, guard.WithClock(clock.Now), guard.WithFailClosed(time.Second), guard.WithDenyCache(guard.DenyCache{MaxKeys: 100}))
	l, err := core.NewLimiter(g, []core.Policy{{Name: "q", Key: keyfunc.Const("k"), Limit: core.PerSecond(10).WithBurst(1)}})
	require.NoError(t, err)
	r, err := l.Allow(ctx, "q", "a")
	require.NoError(t, err)
	require.True(t, r.Allowed)
	r, err = l.Allow(ctx, "q", "a")
	require.NoError(t, err)
	require.False(t, r.Allowed)
	calls := backend.calls.Load()
	r, err = l.Allow(ctx, "q", "a")
	require.NoError(t, err)
	require.Equal(t, core.FromDenyCache, r.Source)
	require.Equal(t, calls, backend.calls.Load())

	res, err := l.Reserve(ctx, "q", "a", time.Second)
	require.NoError(t, err)
	require.True(t, res.OK(), "the deny cache answered a booking")
	require.Equal(t, 100*time.Millisecond, res.Result().RetryAfter)
	require.Equal(t, calls+1, backend.calls.Load())
	require.NoError(t, res.Cancel(ctx))

	backend.failWith(errors.New("down"))
	res, err = l.Reserve(ctx, "q", "b", time.Second)
	require.NoError(t, err)
	require.False(t, res.OK())
	require.Equal(t, core.FailedClosed, res.Result().Source)
}
