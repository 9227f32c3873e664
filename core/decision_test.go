package core_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// frozen returns a memory store whose clock stands still at t0 (plus *at).
func frozen(t *testing.T) (*memorystore.Store, *time.Duration) {
	t.Helper()
	at := new(time.Duration)
	s, err := memorystore.New(memorystore.WithClock(func() time.Time { return t0.Add(*at) }))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s, at
}

// The binding policy is the one that runs out first, not
// the one with the smallest share left.
func TestBindingIsTheFewestRequestsLeft(t *testing.T) {
	s, _ := frozen(t)
	l, err := core.NewLimiter(s, []core.Policy{
		{Name: "global", Key: keyfunc.Const("all"), Limit: core.PerHour(100)},
		{Name: "per-user", Key: keyfunc.Header("U"), Limit: core.PerHour(10)},
	})
	require.NoError(t, err)
	ctx := context.Background()
	for i := range 60 {
		_, err := l.Check(ctx, keyfunc.Static{Headers: map[string][]string{"U": {fmt.Sprint("u", i)}}})
		require.NoError(t, err)
	}
	d, err := l.Check(ctx, keyfunc.Static{Headers: map[string][]string{"U": {"alice"}}})
	require.NoError(t, err)
	require.Equal(t, int64(39), d.Results[0].Remaining)
	require.Equal(t, int64(9), d.Results[1].Remaining)
	require.Equal(t, "per-user", d.Bound().Policy, "9 more requests can pass, not 39")
}

func TestBindingTable(t *testing.T) {
	res := func(allowed bool, remaining int64, retry, reset time.Duration) core.Result {
		return core.Result{Allowed: allowed, Capacity: 100, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
	}
	cases := []struct {
		name string
		rs   []core.Result
		sh   []bool
		want int
	}{
		{"fewest left, not smallest share", []core.Result{{Allowed: true, Capacity: 100, Remaining: 39}, {Allowed: true, Capacity: 10, Remaining: 9}}, nil, 1},
		{"fewest left first", []core.Result{{Allowed: true, Capacity: 10, Remaining: 9}, {Allowed: true, Capacity: 100, Remaining: 39}}, nil, 0},
		{"tie: longest reset", []core.Result{res(true, 5, 0, time.Second), res(true, 5, 0, time.Minute)}, nil, 1},
		{"denied beats allowed", []core.Result{res(true, 0, 0, time.Hour), res(false, 3, time.Second, time.Second)}, nil, 1},
		{"longest retry among denied", []core.Result{res(false, 0, time.Minute, time.Minute), res(false, 0, time.Second, time.Hour)}, nil, 0},
		{"never beats any wait", []core.Result{res(false, 0, time.Hour, time.Hour), res(false, 5, core.RetryNever, 0)}, nil, 1},
		{"shadow never binds", []core.Result{res(false, 0, time.Hour, time.Hour), res(true, 50, 0, 0)}, []bool{true, false}, 1},
		{"all shadow: by the rule", []core.Result{res(true, 9, 0, 0), res(false, 0, time.Second, 0)}, []bool{true, true}, 1},
	}
	for _, c := range cases {
		ps := make([]core.Policy, len(c.rs))
		for i := range ps {
			ps[i] = core.Policy{Name: string(rune('a' + i)), Key: keyfunc.Const("k"), Limit: core.PerHour(100), Shadow: c.sh != nil && c.sh[i]}
		}
		st := &scripted{rs: c.rs}
		l, err := core.NewLimiter(st, ps)
		require.NoError(t, err)
		d, err := l.Check(context.Background(), keyfunc.Static{})
		require.NoError(t, err, c.name)
		require.Equal(t, c.want, d.Binding, c.name)
	}
}

// Property: the binding result is never less constraining than any other
// non-shadow result, by an independent ordering.
func TestBindingProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	rank := func(r core.Result) [3]int64 { // lower is tighter
		if !r.Allowed {
			return [3]int64{0, -int64(r.RetryAfter), 0}
		}
		return [3]int64{1, r.Remaining, -int64(r.ResetAfter)}
	}
	less := func(a, b [3]int64) bool { return slices.Compare(a[:], b[:]) < 0 }
	for range 2000 {
		n := 1 + rng.IntN(5)
		rs := make([]core.Result, n)
		ps := make([]core.Policy, n)
		allShadow := true
		for i := range rs {
			rs[i] = core.Result{Allowed: rng.IntN(3) > 0, Capacity: 1 + rng.Int64N(5), Remaining: rng.Int64N(4),
				RetryAfter: time.Duration(rng.IntN(4)) * time.Second, ResetAfter: time.Duration(rng.IntN(4)) * time.Second}
			ps[i] = core.Policy{Name: string(rune('a' + i)), Key: keyfunc.Const("k"), Limit: core.PerHour(100), Shadow: rng.IntN(4) == 0}
			allShadow = allShadow && ps[i].Shadow
		}
		l, err := core.NewLimiter(&scripted{rs: rs}, ps)
		require.NoError(t, err)
		d, err := l.Check(context.Background(), keyfunc.Static{})
		require.NoError(t, err)
		b := d.Binding
		require.True(t, allShadow || !ps[b].Shadow, "a shadow binds: %+v", rs)
		for i := range rs {
			if ps[i].Shadow && !allShadow {
				continue
			}
			require.False(t, less(rank(rs[i]), rank(rs[b])), "result %d is tighter than the binding %d: %+v", i, b, rs)
		}
	}
}

// A shadow policy never changes the client-visible state.
func TestStateIgnoresShadowPolicies(t *testing.T) {
	s, _ := frozen(t)
	l, err := core.NewLimiter(s, []core.Policy{
		{Name: "real", Key: keyfunc.Const("a"), Limit: core.PerHour(100)},
		{Name: "trial", Key: keyfunc.Const("a"), Limit: core.PerHour(2), Shadow: true},
	})
	require.NoError(t, err)
	states := []core.State{}
	for range 4 {
		d, err := l.Check(context.Background(), keyfunc.Static{})
		require.NoError(t, err)
		require.True(t, d.Allowed)
		require.Equal(t, "real", d.Bound().Policy)
		states = append(states, d.State())
	}
	require.Equal(t, []core.State{core.Normal, core.Normal, core.Normal, core.Normal}, states, "the trial went warning and throttled; the client must not see it")
	// Shadow only: Normal.
	ls, err := core.NewLimiter(s, []core.Policy{{Name: "trial2", Key: keyfunc.Const("a"), Limit: core.PerHour(1)}}, core.WithShadow())
	require.NoError(t, err)
	for range 3 {
		d, err := ls.Check(context.Background(), keyfunc.Static{})
		require.NoError(t, err)
		require.True(t, d.Allowed)
		require.Equal(t, core.Normal, d.State())
	}
}

// Peek's Allowed is whether a request of cost 1 would pass.
func TestPeekReportsDenial(t *testing.T) {
	s, _ := frozen(t)
	for _, a := range []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.FixedWindow, core.SlidingWindowLog, core.SlidingWindowCounter, core.GCRA} {
		l, err := core.NewLimiter(s, []core.Policy{
			{Name: "p-" + a.String(), Key: keyfunc.Const("a"), Limit: core.PerHour(2).WithAlgorithm(a)},
			{Name: "trial-" + a.String(), Key: keyfunc.Const("a"), Limit: core.PerHour(1).WithAlgorithm(a), Shadow: true},
		})
		require.NoError(t, err)
		ctx := context.Background()
		for i := range 3 {
			p, err := l.Peek(ctx, keyfunc.Static{})
			require.NoError(t, err)
			d, err := l.Check(ctx, keyfunc.Static{})
			require.NoError(t, err)
			require.Equal(t, d.Allowed, p.Allowed, "%s: peek %d said %v, the check said %v", a, i, p.Allowed, d.Allowed)
		}
		p, err := l.Peek(ctx, keyfunc.Static{})
		require.NoError(t, err)
		require.False(t, p.Allowed, a)
	}
}

// An override's limit is what the Decision describes.
func TestOverrideIsTheLimitDescribed(t *testing.T) {
	s, _ := frozen(t)
	testOverrideDescribed(t, s)
}

func testOverrideDescribed(t *testing.T, s core.Store) {
	t.Helper()
	policy := core.PerMinute(10)
	name := "per-key-" + time.Now().Format("150405.000000000")
	l, err := core.NewLimiter(s, []core.Policy{
		{Name: name, Key: keyfunc.Header("K"), Limit: policy},
		{Name: name + "-floor", Key: keyfunc.Const("floor" + name), Limit: core.PerHour(100000)},
	})
	require.NoError(t, err)
	ctx := context.Background()
	raised := core.PerHour(1000)
	require.NoError(t, l.SetOverride(ctx, name, "vip", raised, time.Now().Add(time.Hour)))
	require.NoError(t, l.Block(ctx, name, "bad", time.Now().Add(time.Hour)))
	req := func(k string) keyfunc.Request { return keyfunc.Static{Headers: map[string][]string{"K": {k}}} }
	for _, check := range []func(keyfunc.Request) (core.Decision, error){
		func(r keyfunc.Request) (core.Decision, error) { return l.Check(ctx, r) },
		func(r keyfunc.Request) (core.Decision, error) { return l.Peek(ctx, r) },
	} {
		d, err := check(req("vip"))
		require.NoError(t, err)
		require.True(t, d.Allowed)
		require.Equal(t, raised, d.Results[0].Limit, "the override applied")
		require.Equal(t, int64(1000), d.Results[0].Result.Capacity)
		require.Equal(t, core.PerHour(100000), d.Results[1].Limit)
		d, err = check(req("regular"))
		require.NoError(t, err)
		require.Equal(t, policy, d.Results[0].Limit)
		require.Equal(t, int64(10), d.Results[0].Result.Capacity)
		d, err = check(req("bad"))
		require.NoError(t, err)
		require.False(t, d.Allowed)
		require.Equal(t, policy, d.Results[0].Limit, "a block is described by the policy's limit")
		require.Zero(t, d.Results[0].Remaining)
		require.Greater(t, d.Results[0].RetryAfter, 59*time.Minute)
	}
	// One policy alone (the single-Take path) too.
	l1, err := core.NewLimiter(s, []core.Policy{{Name: name, Key: keyfunc.Header("K"), Limit: policy}})
	require.NoError(t, err)
	d, err := l1.Check(ctx, req("vip"))
	require.NoError(t, err)
	require.Equal(t, raised, d.Results[0].Limit)
	require.Equal(t, raised, d.Bound().Limit)
}

// scripted is a Store that answers the results it is given, in order, and
// keeps nothing.
type scripted struct{ rs []core.Result }

func (s *scripted) Take(_ context.Context, _ []core.Op, out []core.Result) error {
	copy(out, s.rs)
	return nil
}
func (s *scripted) Refund(context.Context, core.Admission) error               { return nil }
func (s *scripted) Reset(context.Context, core.Key, core.Limit) error          { return nil }
func (s *scripted) SetOverride(context.Context, core.Key, core.Override) error { return nil }
func (s *scripted) ClearOverride(context.Context, core.Key) error              { return nil }

var _ core.Store = (*scripted)(nil)

// Property: whatever shadow policies report, the client-visible
// parts of a Decision (Allowed, State, the binding policy) are those of the
// Decision without them.
func TestShadowNeverLeaksProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 2000 {
		n := 2 + rng.IntN(4)
		rs := make([]core.Result, n)
		ps := make([]core.Policy, n)
		var real []core.Result
		var realPs []core.Policy
		for i := range rs {
			allowed := rng.IntN(2) == 0
			st := core.State(rng.IntN(2))
			if !allowed {
				st = core.Throttled
			}
			rs[i] = core.Result{Allowed: allowed, Capacity: 10, Remaining: rng.Int64N(10), RetryAfter: time.Duration(rng.IntN(3)) * time.Second, State: st}
			ps[i] = core.Policy{Name: fmt.Sprint("p", i), Key: keyfunc.Const("k"), Limit: core.PerHour(10), Shadow: i > 0 && rng.IntN(2) == 0}
			if !ps[i].Shadow {
				real, realPs = append(real, rs[i]), append(realPs, ps[i])
			}
		}
		check := func(ps []core.Policy, rs []core.Result) core.Decision {
			l, err := core.NewLimiter(&scripted{rs: rs}, ps)
			require.NoError(t, err)
			d, err := l.Check(context.Background(), keyfunc.Static{})
			require.NoError(t, err)
			return d
		}
		all, only := check(ps, rs), check(realPs, real)
		require.Equal(t, only.Allowed, all.Allowed)
		require.Equal(t, only.State(), all.State())
		require.Equal(t, only.Bound().Policy, all.Bound().Policy)
	}
}
