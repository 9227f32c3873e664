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

func TestNewLimiterRejectsBadPolicies(t *testing.T) {
	s, err := memorystore.New()
	require.NoError(t, err)
	defer s.Close()
	k := keyfunc.Const("all")
	cases := []struct {
		name string
		ps   []core.Policy
		want string
	}{
		{"none", nil, "no policies"},
		{"empty name", []core.Policy{{Key: k, Limit: core.PerSecond(1)}}, "Name: must be 1 to 64"},
		{"bad name", []core.Policy{{Name: `a"b`, Key: k, Limit: core.PerSecond(1)}}, "Name: only"},
		{"duplicate", []core.Policy{{Name: "a", Key: k, Limit: core.PerSecond(1)}, {Name: "a", Key: k, Limit: core.PerSecond(2)}}, `policy "a": Name: duplicate`},
		{"no key", []core.Policy{{Name: "a", Limit: core.PerSecond(1)}}, `policy "a": Key: required`},
		{"bad limit", []core.Policy{{Name: "a", Key: k, Limit: core.PerSecond(-3)}}, `sluice: policy "a": Limit.Rate: must be at least 1`},
	}
	for _, c := range cases {
		_, err := core.NewLimiter(s, c.ps)
		require.ErrorContains(t, err, c.want, c.name)
	}
	_, err = core.NewLimiter(nil, []core.Policy{{Name: "a", Key: k, Limit: core.PerSecond(1)}})
	require.Error(t, err)
}

func TestLimiterIsAllOrNothing(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s, err := memorystore.New(memorystore.WithClock(func() time.Time { return now }))
	require.NoError(t, err)
	defer s.Close()
	user := keyfunc.Header("X-User")
	ip := keyfunc.IP()
	l, err := core.NewLimiter(s, []core.Policy{
		{Name: "per-ip", Key: ip, Limit: core.PerMinute(5)},
		{Name: "per-user", Key: user, Limit: core.PerMinute(2)},
	})
	require.NoError(t, err)
	req := &keyfunc.Static{Remote: "192.0.2.1:1", Headers: map[string][]string{"X-User": {"alice"}}}
	ctx := context.Background()
	for range 2 {
		d, err := l.Check(ctx, req)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	d, err := l.Check(ctx, req)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	require.Equal(t, "per-user", d.Bound().Policy)
	require.True(t, d.Results[0].Allowed, "per-ip allows it")
	require.Equal(t, int64(3), d.Results[0].Remaining, "but the denied request consumed nothing from per-ip")
	// Another user from the same IP still has the per-ip quota left.
	other := &keyfunc.Static{Remote: "192.0.2.1:1", Headers: map[string][]string{"X-User": {"bob"}}}
	d, err = l.Check(ctx, other)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Equal(t, int64(2), d.Results[0].Remaining)
	// No user: per-user is skipped (never a shared bucket), per-ip still
	// counts the request.
	d, err = l.Check(ctx, &keyfunc.Static{Remote: "192.0.2.1:1"})
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Equal(t, []string{"per-user"}, d.Skipped)
	require.Len(t, d.Results, 1)
	require.Equal(t, "per-ip", d.Results[0].Policy)
	require.Equal(t, int64(1), d.Results[0].Remaining)
	// No identity at all: an error wrapping ErrNoKey.
	_, err = l.Check(ctx, &keyfunc.Static{Remote: "garbage"})
	require.Error(t, err)
}

type recordingObserver struct {
	allowed, denied, failed int
	took                    []time.Duration
}

func (o *recordingObserver) Decided(_ context.Context, _ keyfunc.Request, d *core.Decision, took time.Duration, err error) {
	switch {
	case err != nil:
		o.failed++
	case d.Allowed:
		o.allowed++
	default:
		o.denied++
	}
	o.took = append(o.took, took)
}

func TestObserverSeesEveryDecision(t *testing.T) {
	s, err := memorystore.New()
	require.NoError(t, err)
	defer s.Close()
	var a, b recordingObserver
	ip := keyfunc.IP()
	l, err := core.NewLimiter(s, []core.Policy{{Name: "ip", Key: ip, Limit: core.PerMinute(2)}},
		core.WithObserver(&a), core.WithObserver(nil), core.WithObserver(&b))
	require.NoError(t, err)
	ctx := context.Background()
	for range 3 {
		_, _ = l.Check(ctx, keyfunc.Static{Remote: "192.0.2.1:1"})
	}
	_, err = l.Check(ctx, keyfunc.Static{Remote: "garbage"})
	require.Error(t, err)
	_, err = l.CheckWith(ctx, keyfunc.Static{Remote: "192.0.2.1:1"}, core.Call{Cost: -1})
	require.ErrorIs(t, err, core.ErrInvalidCost)
	for _, o := range []*recordingObserver{&a, &b} {
		require.Equal(t, 2, o.allowed)
		require.Equal(t, 1, o.denied)
		require.Equal(t, 2, o.failed)
		require.Len(t, o.took, 5)
		for _, d := range o.took {
			require.Positive(t, d)
		}
	}
}
