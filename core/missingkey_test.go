package core_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// With the docs' own setup (an IP floor and a per-key
// policy), a request without the key is still limited by the floor.
func TestMissingKeyDoesNotEscapeOtherPolicies(t *testing.T) {
	s, _ := frozen(t)
	ip := keyfunc.IP()
	l, err := core.NewLimiter(s, []core.Policy{
		{Name: "per-ip", Key: ip, Limit: core.PerMinute(3)},
		{Name: "per-key", Key: keyfunc.Hash(keyfunc.Header("X-API-Key")), Limit: core.PerHour(5000)},
	})
	require.NoError(t, err)
	allowed := 0
	for range 10 {
		d, err := l.Check(context.Background(), keyfunc.Static{Remote: "203.0.113.5:4000"})
		require.NoError(t, err)
		require.Equal(t, []string{"per-key"}, d.Skipped)
		require.Len(t, d.Results, 1)
		if d.Allowed {
			allowed++
		}
	}
	require.Equal(t, 3, allowed)
}

// DenyRequest: a request without the key is denied, consumes nothing, and
// says it can never pass as it is.
func TestMissingKeyDenyRequest(t *testing.T) {
	s, _ := frozen(t)
	ip := keyfunc.IP()
	l, err := core.NewLimiter(s, []core.Policy{
		{Name: "per-ip", Key: ip, Limit: core.PerMinute(3)},
		{Name: "per-key", Key: keyfunc.Header("X-API-Key"), Limit: core.PerHour(5000), MissingKey: core.DenyRequest},
	})
	require.NoError(t, err)
	ctx := context.Background()
	for range 5 {
		d, err := l.Check(ctx, keyfunc.Static{Remote: "203.0.113.5:4000"})
		require.NoError(t, err)
		require.False(t, d.Allowed)
		require.Nil(t, d.Skipped)
		require.Len(t, d.Results, 2)
		b := d.Bound()
		require.Equal(t, "per-key", b.Policy)
		require.True(t, b.Unidentified)
		require.True(t, b.Never())
		require.Equal(t, int64(3), d.Results[0].Remaining, "per-ip counted nothing")
	}
	d, err := l.Check(ctx, keyfunc.Static{Remote: "203.0.113.5:4000", Headers: map[string][]string{"X-API-Key": {"k"}}})
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Equal(t, int64(2), d.Results[0].Remaining)
	_, err = core.NewLimiter(s, []core.Policy{{Name: "p", Key: ip, Limit: core.PerMinute(3), MissingKey: 7}})
	require.ErrorContains(t, err, `policy "p": MissingKey`)
}

// Only when every matching policy is skipped is there no decision.
func TestMissingEveryKeyIsAnError(t *testing.T) {
	s, _ := frozen(t)
	l, err := core.NewLimiter(s, []core.Policy{
		{Name: "a", Key: keyfunc.Header("A"), Limit: core.PerMinute(3)},
		{Name: "b", Key: keyfunc.Header("B"), Limit: core.PerMinute(3)},
	})
	require.NoError(t, err)
	_, err = l.Check(context.Background(), keyfunc.Static{})
	require.ErrorIs(t, err, core.ErrNoKey)
	require.ErrorContains(t, err, `policy "a"`)
}

// A panicking key function is a key error.
func TestPanickingKeyFunction(t *testing.T) {
	s, _ := frozen(t)
	boom := func(keyfunc.Request) (string, error) { panic("boom") }
	for _, mk := range []core.MissingKey{core.SkipPolicy, core.DenyRequest} {
		l, err := core.NewLimiter(s, []core.Policy{
			{Name: "floor", Key: keyfunc.Const("x"), Limit: core.PerMinute(100)},
			{Name: "bad", Key: boom, Limit: core.PerMinute(3), MissingKey: mk},
		}, core.WithTiering(core.Tiering{Key: boom, Resolve: func(context.Context, string) (string, error) { panic("tier") }}))
		require.NoError(t, err)
		d, err := l.Check(context.Background(), keyfunc.Static{})
		require.NoError(t, err)
		require.Equal(t, mk == core.SkipPolicy, d.Allowed, mk)
		l2, err := core.NewLimiter(s, []core.Policy{{Name: "bad", Key: boom, Limit: core.PerMinute(3)}})
		require.NoError(t, err)
		_, err = l2.Check(context.Background(), keyfunc.Static{})
		require.ErrorContains(t, err, "panicked: boom")
		// A panicking per-call key (an adapter's WithKey) too.
		_, err = l.CheckWith(context.Background(), keyfunc.Static{}, core.Call{Key: boom})
		if mk == core.SkipPolicy {
			require.ErrorContains(t, err, "panicked")
		} else {
			require.NoError(t, err)
		}
	}
	// Resolve panics: the default limits apply.
	l, err := core.NewLimiter(s, []core.Policy{{Name: "t", Key: keyfunc.Const("t"), Limit: core.PerMinute(3), Tiers: map[string]core.Limit{"gold": core.PerMinute(30)}}},
		core.WithTiering(core.Tiering{Key: keyfunc.Const("t"), Resolve: func(context.Context, string) (string, error) { panic("tier") }}))
	require.NoError(t, err)
	d, err := l.Check(context.Background(), keyfunc.Static{})
	require.NoError(t, err)
	require.Equal(t, core.PerMinute(3), d.Results[0].Limit)
}

// Property: for random policies, missing identities and MissingKey
// settings, the Decision holds exactly the identified and denying policies,
// names the skipped ones, is denied exactly when some non-shadow policy
// denies, and a denied request consumes nothing anywhere.
func TestMissingKeyProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 300 {
		s, _ := frozen(t)
		n := 1 + rng.IntN(5)
		ps := make([]core.Policy, n)
		for i := range ps {
			h := fmt.Sprint("H", i)
			var key keyfunc.Func = keyfunc.Header(h)
			if rng.IntN(5) == 0 {
				key = func(r keyfunc.Request) (string, error) {
					if r.Header(h) == "" {
						panic("no " + h)
					}
					return r.Header(h), nil
				}
			}
			ps[i] = core.Policy{Name: fmt.Sprint("p", i), Key: key, Limit: core.PerHour(1 + rng.Int64N(3)),
				MissingKey: core.MissingKey(rng.IntN(2)), Shadow: rng.IntN(4) == 0}
		}
		l, err := core.NewLimiter(s, ps)
		require.NoError(t, err)
		for range 6 {
			r := keyfunc.Static{Headers: map[string][]string{}}
			present := make([]bool, n)
			for i := range ps {
				if rng.IntN(3) > 0 {
					present[i] = true
					r.Headers[fmt.Sprint("H", i)] = []string{"id"}
				}
			}
			before, _ := l.Peek(context.Background(), r)
			d, err := l.Check(context.Background(), r)
			var wantSkipped []string
			wantResults := 0
			denyMissing := false
			for i, p := range ps {
				switch {
				case present[i]:
					wantResults++
				case p.MissingKey == core.SkipPolicy:
					wantSkipped = append(wantSkipped, p.Name)
				default:
					wantResults++
					denyMissing = denyMissing || !p.Shadow
				}
			}
			if wantResults == 0 {
				require.Error(t, err, round)
				continue
			}
			require.NoError(t, err, round)
			require.Equal(t, wantSkipped, d.Skipped, round)
			require.Len(t, d.Results, wantResults)
			wantAllowed := !denyMissing
			for _, pr := range d.Results {
				require.Equal(t, !present[idxOf(pr.Policy)], pr.Unidentified)
				if !pr.Allowed && !pr.Shadow {
					wantAllowed = false
				}
			}
			require.Equal(t, wantAllowed, d.Allowed, round)
			if denyMissing {
				require.True(t, d.Bound().Unidentified)
			}
			after, _ := l.Peek(context.Background(), r)
			if !d.Allowed {
				for j := range after.Results {
					require.Equal(t, before.Results[j].Remaining, after.Results[j].Remaining, "a denied request consumed %s", after.Results[j].Policy)
				}
			}
		}
	}
}

func idxOf(name string) int {
	var i int
	fmt.Sscanf(strings.TrimPrefix(name, "p"), "%d", &i)
	return i
}

// Skipping a policy allocates nothing more than deciding it.
func TestSkippedPolicyAllocatesNothing(t *testing.T) {
	s, _ := frozen(t)
	l, err := core.NewLimiter(s, []core.Policy{
		{Name: "a", Key: keyfunc.Header("A"), Limit: core.PerHour(core.MaxRate)},
		{Name: "b", Key: keyfunc.Header("B"), Limit: core.PerHour(core.MaxRate)},
	})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour) // a context to detach from
	defer cancel()
	var d core.Decision
	decide := func(r keyfunc.Request) float64 {
		return testing.AllocsPerRun(200, func() {
			if err := l.Decide(ctx, r, core.Call{}, &d); err != nil {
				t.Fatal(err)
			}
		})
	}
	one := keyfunc.Static{Headers: map[string][]string{"A": {"x"}}}
	require.Zero(t, decide(one), "one policy skipped, one decided")
	require.Equal(t, []string{"b"}, d.Skipped)
}
