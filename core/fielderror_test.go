package core_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/storekit"
	"github.com/sluicehq/sluice/keyfunc"
)

// requireField: err holds a *core.FieldError of field wrapping sentinel
// (nil: none), whose message does not repeat the field.
func requireField(t *testing.T, err error, sentinel error, field string, what ...any) {
	t.Helper()
	var fe *core.FieldError
	require.ErrorAs(t, err, &fe, what...)
	require.Equal(t, field, fe.Field, "%v", err)
	require.NotEmpty(t, fe.Message, "%v", err)
	if sentinel != nil {
		require.ErrorIs(t, err, sentinel)
		require.ErrorIs(t, fe, sentinel, "the FieldError itself wraps the sentinel")
	}
}

// TestEveryValidationNamesItsField: every refusal of core's validation,
// however deeply wrapped, is a *core.FieldError naming the field by its
// path from the value validated.
func TestEveryValidationNamesItsField(t *testing.T) {
	ctx := context.Background()
	s, _ := frozen(t)
	key := keyfunc.Const("k")
	tiering := core.WithTiering(core.Tiering{Key: key, Resolve: func(context.Context, string) (string, error) { return "", nil }})
	newLimiter := func(p core.Policy, opts ...core.LimiterOption) error {
		_, err := core.NewLimiter(s, []core.Policy{p}, opts...)
		return err
	}
	ok := core.Policy{Name: "p", Key: key, Limit: core.PerMinute(2)}
	with := func(f func(*core.Policy)) core.Policy { p := ok; f(&p); return p }

	for _, c := range limitertest.InvalidLimits() {
		requireField(t, c.Limit.Validate(), core.ErrInvalidLimit, c.Field)
		requireField(t, newLimiter(with(func(p *core.Policy) { p.Limit = c.Limit })), core.ErrInvalidLimit, "Limit."+c.Field)
		requireField(t, newLimiter(with(func(p *core.Policy) { p.Tiers = map[string]core.Limit{"gold": c.Limit} }), tiering), core.ErrInvalidLimit, `Tiers["gold"].`+c.Field)
		requireField(t, storekit.ValidateOverride(core.Override{Limit: c.Limit, Until: time.Now().Add(time.Hour)}, time.Now()), core.ErrInvalidLimit, "Limit."+c.Field)
	}
	_, err := core.ParseAlgorithm("token-bucket")
	requireField(t, err, core.ErrInvalidLimit, "Algorithm")
	requireField(t, core.Thresholds{Warn: 1.5, Clear: 0.5}.Validate(), core.ErrInvalidLimit, "Warn")
	requireField(t, core.Thresholds{Warn: 0.5, Clear: 0.6}.Validate(), core.ErrInvalidLimit, "Clear")
	requireField(t, core.ValidatePolicyName(""), nil, "Name")
	requireField(t, core.ValidatePolicyName("a b"), nil, "Name")
	for _, m := range []string{"", "GET POST", "Get", "ANY"} {
		requireField(t, core.ValidateMethod(m), nil, "Methods", m)
	}

	for _, c := range []struct {
		p     core.Policy
		field string
		opts  []core.LimiterOption
	}{
		{with(func(p *core.Policy) { p.Name = "" }), "Name", nil},
		{with(func(p *core.Policy) { p.Key = nil }), "Key", nil},
		{with(func(p *core.Policy) { p.MissingKey = 9 }), "MissingKey", nil},
		{with(func(p *core.Policy) { p.Tiers = map[string]core.Limit{"": core.PerMinute(1)} }), "Tiers", []core.LimiterOption{tiering}},
		{with(func(p *core.Policy) { p.Tiers = map[string]core.Limit{"gold": core.PerMinute(1)} }), "Tiers", nil},
		{with(func(p *core.Policy) { p.Match.Routes = []string{"/ok", "nope"} }), "Match.Routes[1]", nil},
		{with(func(p *core.Policy) { p.Match.Methods = []string{"GET", "ANY"} }), "Match.Methods[1]", nil},
		{ok, "Header", []core.LimiterOption{core.WithIdempotency(core.Idempotency{Header: "a b"})}},
		{ok, "TTL", []core.LimiterOption{core.WithIdempotency(core.Idempotency{TTL: time.Millisecond})}},
		{ok, "MaxRepeats", []core.LimiterOption{core.WithIdempotency(core.Idempotency{MaxRepeats: 1001})}},
	} {
		requireField(t, newLimiter(c.p, c.opts...), nil, c.field, c.field)
	}
	_, err = core.NewLimiter(s, []core.Policy{ok, ok})
	requireField(t, err, nil, "Name")

	requireField(t, storekit.ValidateBooking(-time.Second, 1), core.ErrInvalidCost, "MaxDelay")
	requireField(t, storekit.ValidateBooking(time.Second, 2), core.ErrInvalidCost, "MaxDelay")
	k1, k2 := core.Key{Identity: "a"}, core.Key{Identity: "b"}
	requireField(t, storekit.ValidateGroup([]core.Op{{Key: k1}, {Key: k2, MaxDelay: time.Second}}), core.ErrInvalidCost, "ops[1].MaxDelay")
	requireField(t, storekit.ValidateGroup([]core.Op{{Key: k1}, {Key: k2}, {Key: k1}}), core.ErrInvalidCost, "ops[2].Key")
	requireField(t, storekit.ValidateOverride(core.Override{Until: time.Now().Add(-time.Second)}, time.Now()), core.ErrInvalidLimit, "Until")

	l, err := core.NewLimiter(s, []core.Policy{ok})
	require.NoError(t, err)
	_, err = l.CheckGroup(ctx, []core.GroupOp{{Policy: "p", Identity: "u"}, {Policy: "p"}})
	requireField(t, err, core.ErrNoKey, "ops[1].Identity")
	_, err = l.CheckGroup(ctx, []core.GroupOp{{Policy: "p", Identity: "u", Cost: -1}})
	requireField(t, err, core.ErrInvalidCost, "ops[0].Cost")
	_, err = l.CheckGroup(ctx, []core.GroupOp{{Policy: "q", Identity: "u"}})
	requireField(t, err, nil, "ops[0].Policy")
	_, err = l.CheckWith(ctx, keyfunc.Static{}, core.Call{Cost: -2})
	requireField(t, err, core.ErrInvalidCost, "Cost")
	_, err = l.AllowN(ctx, "p", "", 1)
	requireField(t, err, core.ErrNoKey, "identity")
	_, err = l.AllowN(ctx, "p", "u", -1)
	requireField(t, err, core.ErrInvalidCost, "n")
	_, err = l.ReserveN(ctx, "p", "u", 1, -time.Second)
	requireField(t, err, core.ErrInvalidCost, "maxDelay")
	requireField(t, l.SetOverride(ctx, "p", "u", core.Limit{}, time.Now().Add(time.Hour)), core.ErrInvalidLimit, "lim")
	requireField(t, l.SetOverride(ctx, "p", "", core.PerMinute(1), time.Now().Add(time.Hour)), core.ErrNoKey, "identity")
}

// TestFieldErrorPaths: In nests a path, FieldIn finds the FieldError
// however it is wrapped and keeps its sentinel.
func TestFieldErrorPaths(t *testing.T) {
	fe := &core.FieldError{Field: "Rate", Message: "must be at least 1, got 0", Err: core.ErrInvalidLimit}
	require.Equal(t, "Limit.Rate", fe.In("Limit").Field)
	require.Equal(t, "ops[2].Limit.Rate", fe.In("Limit").In("ops[2]").Field)
	require.Equal(t, `Tiers["gold"].Rate`, (&core.FieldError{Field: `["gold"].Rate`}).In("Tiers").Field)
	require.Equal(t, "Limit", (&core.FieldError{}).In("Limit").Field)
	require.Same(t, fe, fe.In(""))
	require.Equal(t, "Rate", fe.Field, "In copies")
	require.EqualError(t, fe, "Rate: must be at least 1, got 0")

	wrapped := fmt.Errorf("store: %w (limit x)", fe)
	err := storekit.FieldIn("ops[1]", wrapped)
	requireField(t, err, core.ErrInvalidLimit, "ops[1].Rate")
	require.EqualError(t, err, "ops[1].Rate: must be at least 1, got 0")
	plain := errors.New("boom")
	require.EqualError(t, storekit.FieldIn("ops[1]", plain), "ops[1]: boom")
	require.ErrorIs(t, storekit.FieldIn("ops[1]", plain), plain)
	require.NoError(t, storekit.FieldIn("ops[1]", nil))
}
