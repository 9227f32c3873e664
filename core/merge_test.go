package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// Merge: the Decision of two stacked limiters is allowed only if both are,
// names the most constraining policy of either, and refunds nothing: each
// limiter refunds its own Decision.
func TestMerge(t *testing.T) {
	ctx := context.Background()
	req := &keyfunc.Static{Remote: "192.0.2.1:1"}
	s, err := memorystore.New()
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	newLimiter := func(name string, lim core.Limit) *core.Limiter {
		l, err := core.NewLimiter(s, []core.Policy{{Name: name, Key: keyfunc.Const("all"), Limit: lim, Refund: core.RefundFailed}})
		require.NoError(t, err)
		return l
	}
	global, login := newLimiter("global", core.PerMinute(10)), newLimiter("login", core.PerMinute(2))
	check := func(l *core.Limiter) *core.Decision {
		d, err := l.Check(ctx, req)
		require.NoError(t, err)
		return &d
	}

	g, lg := check(global), check(login)
	m := core.Merge(g, lg)
	require.True(t, m.Allowed)
	require.Len(t, m.Results, 2)
	require.Equal(t, "global", m.Results[0].Policy)
	require.Equal(t, "login", m.Bound().Policy, "the fewest remaining binds")
	require.EqualValues(t, 1, m.Bound().Remaining)
	require.False(t, m.Refundable(), "a merge is not an admission")
	require.True(t, g.Refundable() && lg.Refundable())

	// Refunding the merge gives nothing back; refunding the own Decision does.
	require.NoError(t, global.Refund(ctx, m, 503))
	require.NoError(t, login.Refund(ctx, m, 503))
	require.EqualValues(t, 8, check(global).Bound().Remaining, "the merge's refund gave back")
	require.NoError(t, login.Refund(ctx, lg, 503))
	require.EqualValues(t, 1, check(login).Bound().Remaining, "the own refund gave back")

	// The second denies: the merge is denied and its denial binds.
	require.True(t, check(login).Allowed, "the second of two")
	d := check(login)
	require.False(t, d.Allowed)
	m = core.Merge(check(global), d)
	require.False(t, m.Allowed)
	require.Equal(t, "login", m.Bound().Policy)
	require.Positive(t, m.Bound().RetryAfter)
	require.LessOrEqual(t, m.Bound().RetryAfter, time.Minute)

	// The longest wait binds among denials, whichever limiter decided it.
	tight := newLimiter("tight", core.PerHour(1))
	check(tight)
	m = core.Merge(check(tight), check(login))
	require.False(t, m.Allowed)
	require.Equal(t, "tight", m.Bound().Policy, "an hour's wait binds over a minute's")

	// Nothing to merge with: the Decision itself.
	require.Same(t, d, core.Merge(nil, d))
	require.Same(t, d, core.Merge(&core.Decision{}, d))
	require.Same(t, d, core.Merge(d, nil))
	require.Nil(t, core.Merge(nil, nil))
}
