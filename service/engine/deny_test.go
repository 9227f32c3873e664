package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rules"
)

// envoyDeny is an Envoy rules file with Deny rules (requests_per_unit: 0):
// a ban list by the minute, one in shadow, one a vip rule replaces, beside
// a limit of 5 per hour.
const envoyDeny = `
domain: edge
descriptors:
  - key: banned
    rate_limit:
      name: ban
      unit: minute
      requests_per_unit: 0
  - key: tried
    shadow_mode: true
    rate_limit:
      unit: hour
      requests_per_unit: 0
  - key: remote_address
    rate_limit:
      name: per-ip
      unit: hour
      requests_per_unit: 5
  - key: user
    value: root
    rate_limit:
      unit: hour
      requests_per_unit: 100
      replaces:
        - name: ban
`

func desc(key, value string, cost int64) engine.Descriptor {
	return engine.Descriptor{Entries: []rules.Entry{{Key: key, Value: value}}, Cost: cost}
}

// requireDenial checks that p is a Deny rule's denial: nothing left, no
// capacity, and a wait until the end of the current window of period,
// aligned on the Unix epoch.
func requireDenial(t *testing.T, p core.PolicyResult, rule string, period time.Duration) {
	t.Helper()
	require.Equal(t, rule, p.Policy)
	require.False(t, p.Allowed)
	require.Zero(t, p.Capacity)
	require.Zero(t, p.Remaining)
	require.Zero(t, p.Limit.Rate)
	require.Equal(t, period, p.Limit.Period)
	require.Equal(t, core.Throttled, p.State)
	require.Positive(t, p.RetryAfter)
	require.LessOrEqual(t, p.RetryAfter, period)
	require.Equal(t, p.RetryAfter, p.ResetAfter)
	end := time.UnixMicro(p.At).Add(p.ResetAfter)
	require.Zero(t, end.UnixNano()%int64(period), "the window ends at %s, not on a %s boundary", end, period)
	require.WithinDuration(t, time.Now(), time.UnixMicro(p.At), time.Minute)
}

// TestDenyDescriptors: an Envoy file with requests_per_unit: 0 loads, and
// a descriptor reaching the Deny rule denies its request, whatever its
// cost or sign, taking nothing from any counter.
func TestDenyDescriptors(t *testing.T) {
	ctx := context.Background()
	snap := parse(t, envoyDeny)
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			e, err := engine.New(ctx, newStore(t), newSource(snap))
			require.NoError(t, err, "a Deny rule kept the engine from building")
			do := func(ds ...engine.Descriptor) engine.DescriptorsResult {
				t.Helper()
				r, err := e.Descriptors(ctx, "edge", ds)
				require.NoError(t, err)
				require.Len(t, r.Statuses, len(ds))
				return r
			}
			addr := desc("remote_address", "192.0.2.7", 2)
			for range 3 {
				r := do(addr, desc("banned", "192.0.2.7", 1))
				require.False(t, r.Allowed)
				require.False(t, r.Decision.Allowed)
				require.True(t, r.Statuses[1].Rule.Deny)
				requireDenial(t, r.Statuses[1].Result, "ban", time.Minute)
				require.EqualValues(t, 5, r.Statuses[0].Result.Remaining, "a denied request took from another counter")
				require.True(t, r.Statuses[0].Result.Allowed)
				b := r.Decision.Bound()
				require.Equal(t, "ban", b.Policy, "the Deny rule binds the decision")
				require.Len(t, r.Decision.Results, 2)
			}
			// A peek and negative hits reach the rule too: denied, nothing
			// counted.
			for _, d := range []engine.Descriptor{desc("banned", "x", 0), {Entries: []rules.Entry{{Key: "banned", Value: "x"}}, Cost: 3, Negative: true}} {
				r := do(d, addr)
				require.False(t, r.Allowed)
				requireDenial(t, r.Statuses[0].Result, "ban", time.Minute)
				require.EqualValues(t, 5, r.Statuses[1].Result.Remaining)
			}
			// Two descriptors of one Deny rule: one result in the decision.
			r := do(desc("banned", "a", 1), desc("banned", "b", 1))
			require.False(t, r.Allowed)
			require.Len(t, r.Decision.Results, 1)

			// In shadow it reports its denial and denies nothing.
			r = do(addr, desc("tried", "x", 1))
			require.True(t, r.Allowed)
			require.True(t, r.Statuses[1].Result.ShadowDenied())
			requireDenial(t, r.Statuses[1].Result, r.Statuses[1].Rule.ID, time.Hour)
			require.EqualValues(t, 3, r.Statuses[0].Result.Remaining)
			require.Equal(t, "per-ip", r.Decision.Bound().Policy, "a shadow rule bound the decision")

			// Replaced: no rule applies.
			r = do(desc("user", "root", 1), desc("banned", "192.0.2.7", 1))
			require.True(t, r.Allowed)
			require.Nil(t, r.Statuses[1].Rule)
			require.EqualValues(t, 99, r.Statuses[0].Result.Remaining)

			// The counter is where the admitted request left it.
			r = do(addr)
			require.True(t, r.Allowed)
			require.EqualValues(t, 1, r.Statuses[0].Result.Remaining)
		})
	}
}

// TestDenyOnly: an engine whose only rules are Deny rules has no policy at
// all; every call still answers.
func TestDenyOnly(t *testing.T) {
	ctx := context.Background()
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			e := newEngine(t, newStore(t), `
domain: edge
descriptors:
  - key: banned
    rate_limit: {unit: second, requests_per_unit: 0}
`)
			r, err := e.Descriptors(ctx, "edge", []engine.Descriptor{desc("banned", "x", 1), desc("other", "y", 1)})
			require.NoError(t, err)
			require.False(t, r.Allowed)
			requireDenial(t, r.Statuses[0].Result, "edge.banned", time.Second)
			require.Nil(t, r.Statuses[1].Rule)

			snap, err := rules.New("deny", []*rules.Rule{
				{ID: "ip-ban", Dimension: "ip", Deny: true, Limit: core.Limit{Algorithm: core.FixedWindow, Period: time.Hour}},
			}, nil)
			require.NoError(t, err)
			e, err = engine.New(ctx, newStore(t), newSource(snap))
			require.NoError(t, err)
			c := engine.Check{Dimension: "ip", Identifier: "198.51.100.1", Cost: 1}
			res := mustCheck(t, e, c)
			require.False(t, res.Allowed)
			require.Equal(t, "ip-ban", res.Rule)
			res, err = e.Report(ctx, c)
			require.NoError(t, err)
			require.False(t, res.Allowed)
			require.NoError(t, e.Reset(ctx, c))
			rs, errs := e.CheckBatch(ctx, []engine.Check{c, {Dimension: "user", Identifier: "u", Cost: 1}}, true)
			require.NoError(t, errs[0])
			require.NoError(t, errs[1])
			require.False(t, rs[0].Allowed)
			require.False(t, rs[1].Allowed, "all or nothing")
			require.Empty(t, rs[1].Rule)
		})
	}
}

// nativeDeny holds native rules with Deny rules (as a rules database can
// give them): /admin is banned for users, /beta
// banned in shadow, and the ip dimension has only a ban.
func nativeDeny(t *testing.T) *rules.Snapshot {
	t.Helper()
	deny := func(p time.Duration) core.Limit { return core.Limit{Algorithm: core.FixedWindow, Period: p} }
	s, err := rules.New("native-deny", []*rules.Rule{
		{ID: "per-user", Dimension: "user", Limit: core.Limit{Algorithm: core.FixedWindow, Rate: 5, Period: time.Hour}},
		{ID: "admin-ban", Dimension: "user", Endpoints: []string{"/admin/**"}, Deny: true, Limit: deny(time.Minute)},
		{ID: "beta-ban", Dimension: "user", Endpoints: []string{"/beta"}, Deny: true, Shadow: true, Limit: deny(time.Hour)},
		{ID: "ip-ban", Dimension: "ip", Deny: true, Limit: deny(24 * time.Hour)},
	}, nil)
	require.NoError(t, err)
	return s
}

// TestDenyNative: a native Deny rule denies every check it applies to
// (native checks, peeks, batches, reports), taking nothing from the
// check's other rules; a shadow one denies nothing.
func TestDenyNative(t *testing.T) {
	ctx := context.Background()
	snap := nativeDeny(t)
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			e, err := engine.New(ctx, newStore(t), newSource(snap))
			require.NoError(t, err)
			user := func(endpoint string, cost int64) engine.Check {
				return engine.Check{Dimension: "user", Identifier: "u1", Endpoint: endpoint, Cost: cost}
			}
			left := func() int64 {
				t.Helper()
				return remaining(t, mustCheck(t, e, user("/orders", 0)), "per-user")
			}
			for _, cost := range []int64{1, 0, 3} {
				r := mustCheck(t, e, user("/admin/users", cost))
				require.False(t, r.Allowed, "cost %d", cost)
				require.Equal(t, "admin-ban", r.Rule)
				require.Zero(t, r.Limit)
				require.Zero(t, r.Remaining)
				require.Equal(t, core.Throttled, r.State)
				require.Positive(t, r.RetryAfter)
				require.LessOrEqual(t, r.RetryAfter, time.Minute)
				require.Zero(t, r.ResetAt.UnixNano()%int64(time.Minute), "reset at %s", r.ResetAt)
				require.Len(t, r.Decision.Results, 2)
				require.EqualValues(t, 5, left(), "a denied check took from per-user")
			}
			// Naming the rule, and an idempotency key, change nothing.
			named := user("/orders", 1)
			named.Rule = "admin-ban"
			r := mustCheck(t, e, named)
			require.False(t, r.Allowed)
			requireDenial(t, r.Decision.Results[0], "admin-ban", time.Minute)
			idem := user("/admin", 1)
			idem.IdempotencyKey = "k1"
			require.False(t, mustCheck(t, e, idem).Allowed)
			require.False(t, mustCheck(t, e, idem).Allowed)
			require.EqualValues(t, 5, left())

			// A dimension whose only rule is a Deny rule.
			r = mustCheck(t, e, engine.Check{Dimension: "ip", Identifier: "203.0.113.9", Cost: 1})
			require.False(t, r.Allowed)
			require.Equal(t, "ip-ban", r.Rule)

			// Shadow: counted as usual, its denial reported.
			r = mustCheck(t, e, user("/beta", 1))
			require.True(t, r.Allowed)
			require.Equal(t, "per-user", r.Rule)
			require.EqualValues(t, 4, r.Remaining)
			var shadow core.PolicyResult
			for _, p := range r.Decision.Results {
				if p.Policy == "beta-ban" {
					shadow = p
				}
			}
			require.True(t, shadow.ShadowDenied())
			requireDenial(t, shadow, "beta-ban", time.Hour)

			// Report: a Deny rule's denial drains nothing (cost 10 would
			// drain per-user otherwise).
			r, err = e.Report(ctx, user("/admin/x", 10))
			require.NoError(t, err)
			require.False(t, r.Allowed)
			require.Equal(t, "admin-ban", r.Rule)
			require.EqualValues(t, 4, left(), "a report denied by a Deny rule drained per-user")

			// Batches: each on its own, and all or nothing.
			rs, errs := e.CheckBatch(ctx, []engine.Check{user("/orders", 1), user("/admin/x", 1)}, false)
			require.NoError(t, errs[0])
			require.NoError(t, errs[1])
			require.True(t, rs[0].Allowed)
			require.False(t, rs[1].Allowed)
			require.Equal(t, "admin-ban", rs[1].Rule)
			require.EqualValues(t, 3, left())
			other := engine.Check{Dimension: "user", Identifier: "u2", Endpoint: "/admin", Cost: 1}
			rs, errs = e.CheckBatch(ctx, []engine.Check{user("/orders", 2), other}, true)
			require.NoError(t, errs[0])
			require.NoError(t, errs[1])
			require.False(t, rs[0].Allowed, "all or nothing")
			require.Equal(t, "per-user", rs[0].Rule)
			require.EqualValues(t, 3, rs[0].Remaining, "peeked")
			require.False(t, rs[1].Allowed)
			require.Equal(t, "admin-ban", rs[1].Rule)
			requireDenial(t, rs[1].Decision.Results[rs[1].Decision.Binding], "admin-ban", time.Minute)
			require.EqualValues(t, 3, left(), "a batch denied by a Deny rule took something")
			rs, errs = e.CheckBatch(ctx, []engine.Check{user("/orders", 1), user("/beta", 1)}, true)
			require.NoError(t, errs[0])
			require.NoError(t, errs[1])
			require.True(t, rs[0].Allowed, "a shadow Deny rule denied a batch")
			require.True(t, rs[1].Allowed)
			require.EqualValues(t, 1, left(), "both checks counted on per-user")

			// Reset: the Deny rule has no counter; per-user is fresh.
			require.NoError(t, e.Reset(ctx, user("/admin/x", 0)))
			require.EqualValues(t, 5, left())
			require.False(t, mustCheck(t, e, user("/admin/x", 1)).Allowed)
		})
	}
}

// TestDenyReload: a rules change adding a Deny rule is put in force (it
// was refused: "invalid limit: Rate: must be at least 1").
func TestDenyReload(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	src := newSource(parse(t, "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: hour, requests_per_unit: 5}\n"))
	e, err := engine.New(ctx, memStore(t), src)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	next := parse(t, envoyDeny)
	src.next <- next
	require.Eventually(t, func() bool { return e.Snapshot() == next }, 5*time.Second, 10*time.Millisecond, "the rules with a Deny rule were refused")
	r, err := e.Descriptors(ctx, "edge", []engine.Descriptor{desc("banned", "x", 1)})
	require.NoError(t, err)
	require.False(t, r.Allowed)
	cancel()
	require.NoError(t, <-done)
}
