package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rules"
)

func usageOf(t *testing.T, us []engine.RuleUsage) map[string]engine.RuleUsage {
	t.Helper()
	m := map[string]engine.RuleUsage{}
	for _, u := range us {
		m[u.Rule.ID] = u
	}
	return m
}

func TestUsage(t *testing.T) {
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			until := time.Now().Add(time.Hour)
			raise := rules.Override{RuleID: "orders", Dimension: "user", Identifier: "ann", Limit: core.PerHour(10).WithAlgorithm(core.FixedWindow), Until: until}
			block := rules.Override{RuleID: "reads", Dimension: "user", Identifier: "bob", Until: until}
			lapsed := rules.Override{RuleID: "orders", Dimension: "user", Identifier: "bob", Limit: core.PerHour(50), Until: time.Now().Add(-time.Minute)}
			e, err := engine.New(ctx, newStore(t), newSource(overrideSnap(t, "1", raise, block, lapsed)))
			require.NoError(t, err)

			// Before any check: full counters, the rules of the dimension
			// only, in order, endpoint patterns or not.
			us, err := e.Usage(ctx, "user", "carl")
			require.NoError(t, err)
			require.Len(t, us, 2)
			require.Equal(t, "orders", us[0].Rule.ID)
			require.Equal(t, "reads", us[1].Rule.ID)
			for _, u := range us {
				require.Zero(t, u.Used)
				require.Equal(t, u.Capacity, u.Remaining)
				require.Nil(t, u.Override)
				require.False(t, u.Blocked)
				require.Equal(t, "", u.Tier)
			}
			require.EqualValues(t, 3, us[0].Capacity)
			require.Equal(t, core.PerHour(3).WithAlgorithm(core.FixedWindow), us[0].Limit)

			// After 3 checks: Used 3 on both rules, and peeking twice
			// consumes nothing.
			spend(t, e, order("carl"), 3)
			for range 2 {
				u := usageOf(t, must(e.Usage(ctx, "user", "carl")))
				require.EqualValues(t, 3, u["orders"].Used)
				require.EqualValues(t, 0, u["orders"].Remaining)
				require.Equal(t, core.Throttled, u["orders"].State)
				require.EqualValues(t, 3, u["reads"].Used)
				require.EqualValues(t, 97, u["reads"].Remaining)
				require.Equal(t, core.Normal, u["reads"].State)
				require.WithinDuration(t, time.Now().Add(time.Hour), u["orders"].ResetAt, time.Hour+time.Second)
				require.True(t, u["orders"].ResetAt.After(time.Now()))
			}

			// The override's limit.
			spend(t, e, order("ann"), 4)
			u := usageOf(t, must(e.Usage(ctx, "user", "ann")))
			require.NotNil(t, u["orders"].Override)
			require.Equal(t, raise, *u["orders"].Override)
			require.Equal(t, raise.Limit, u["orders"].Limit)
			require.EqualValues(t, 10, u["orders"].Capacity)
			require.EqualValues(t, 4, u["orders"].Used)
			require.Nil(t, u["reads"].Override)
			require.EqualValues(t, 100, u["reads"].Capacity)

			// A block; a lapsed override is none.
			u = usageOf(t, must(e.Usage(ctx, "user", "bob")))
			require.True(t, u["reads"].Blocked)
			require.Equal(t, core.Limit{}, u["reads"].Limit)
			require.Equal(t, core.Throttled, u["reads"].State)
			require.EqualValues(t, 0, u["reads"].Remaining)
			require.EqualValues(t, 0, u["reads"].Capacity)
			require.EqualValues(t, 0, u["reads"].Used)
			require.WithinDuration(t, until, u["reads"].ResetAt, 2*time.Second)
			require.False(t, u["orders"].Blocked)
			require.Nil(t, u["orders"].Override)
			require.EqualValues(t, 3, u["orders"].Capacity)

			// The tier's limit.
			spend(t, e, order("pat"), 2)
			u = usageOf(t, must(e.Usage(ctx, "user", "pat")))
			require.Equal(t, "pro", u["orders"].Tier)
			require.Equal(t, core.PerHour(6).WithAlgorithm(core.FixedWindow), u["orders"].Limit)
			require.EqualValues(t, 6, u["orders"].Capacity)
			require.EqualValues(t, 2, u["orders"].Used)
			require.Equal(t, "pro", u["reads"].Tier, "the caller's tier, whether or not the rule has one for it")
			require.EqualValues(t, 100, u["reads"].Capacity)

			// Other dimensions; a dimension without rules.
			ip := must(e.Usage(ctx, "ip", "10.0.0.1"))
			require.Len(t, ip, 1)
			require.Equal(t, "per-ip", ip[0].Rule.ID)
			none, err := e.Usage(ctx, "api_key", "k")
			require.NoError(t, err)
			require.Empty(t, none)
		})
	}
}

func TestUsageInvalid(t *testing.T) {
	e, err := engine.New(context.Background(), memStore(t), newSource(overrideSnap(t, "1")))
	require.NoError(t, err)
	for _, c := range []struct{ dim, id, field string }{
		{"", "a", "dimension"},
		{strings.Repeat("d", engine.MaxDimension+1), "a", "dimension"},
		{"user", "", "identifier"},
		{"user", strings.Repeat("i", engine.MaxIdentifier+1), "identifier"},
	} {
		_, err := e.Usage(context.Background(), c.dim, c.id)
		require.ErrorIs(t, err, engine.ErrInvalid)
		var fe *core.FieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, c.field, fe.Field)
	}
}

// Usage of Deny and unlimited native rules: blocked, and nothing counted.
func TestUsageDenyRule(t *testing.T) {
	s, err := rules.New("1", []*rules.Rule{
		{ID: "ban", Dimension: "user", Deny: true, Limit: core.Limit{Algorithm: core.FixedWindow, Period: time.Minute}},
		{ID: "free", Dimension: "user", Unlimited: true},
	}, nil)
	require.NoError(t, err)
	e, err := engine.New(context.Background(), memStore(t), newSource(s))
	require.NoError(t, err)
	us := must(e.Usage(context.Background(), "user", "ann"))
	require.Len(t, us, 2)
	require.True(t, us[0].Blocked)
	require.Equal(t, core.Throttled, us[0].State)
	require.False(t, us[1].Blocked)
	require.Zero(t, us[1].Capacity)
	require.Equal(t, core.Limit{}, us[1].Limit)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
