package middleware

import (
	"context"
	"reflect"
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
	m := Merge(g, lg)
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
	m = Merge(check(global), d)
	require.False(t, m.Allowed)
	require.Equal(t, "login", m.Bound().Policy)
	require.Positive(t, m.Bound().RetryAfter)
	require.LessOrEqual(t, m.Bound().RetryAfter, time.Minute)

	// The longest wait binds among denials, whichever limiter decided it.
	tight := newLimiter("tight", core.PerHour(1))
	check(tight)
	m = Merge(check(tight), check(login))
	require.False(t, m.Allowed)
	require.Equal(t, "tight", m.Bound().Policy, "an hour's wait binds over a minute's")

	// Nothing to merge with: the Decision itself.
	require.Same(t, d, Merge(nil, d))
	require.Same(t, d, Merge(&core.Decision{}, d))
	require.Same(t, d, Merge(d, nil))
	require.Nil(t, Merge(nil, nil))
}

// A merge shows every exported field of its Results, whatever fields
// PolicyResult and Result gain: shown copies them all.
func TestMergeShowsEveryField(t *testing.T) {
	var p core.PolicyResult
	fill(t, reflect.ValueOf(&p).Elem())
	got := shown(&p)
	requireExportedEqual(t, reflect.ValueOf(p), reflect.ValueOf(got), "PolicyResult")
	require.Equal(t, p.Result, got.Result)
}

// fill sets every exported field of v, a struct, to a value other than
// its zero value.
func fill(t *testing.T, v reflect.Value) {
	t.Helper()
	for i := range v.NumField() {
		f, sf := v.Field(i), v.Type().Field(i)
		if !sf.IsExported() {
			continue
		}
		switch f.Kind() {
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			f.SetInt(int64(i + 1))
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			f.SetUint(uint64(i + 1))
		case reflect.Float64, reflect.Float32:
			f.SetFloat(float64(i) + 0.5)
		case reflect.String:
			f.SetString(sf.Name)
		case reflect.Struct:
			fill(t, f)
		case reflect.Pointer:
			f.Set(reflect.New(f.Type().Elem()))
			if f.Elem().Kind() == reflect.Struct {
				fill(t, f.Elem())
			}
		default:
			t.Fatalf("fill: field %s of kind %s", sf.Name, f.Kind())
		}
	}
}

// requireExportedEqual: a and b, structs of one type, hold the same
// exported fields, each set (not zero).
func requireExportedEqual(t *testing.T, a, b reflect.Value, path string) {
	t.Helper()
	for i := range a.NumField() {
		sf := a.Type().Field(i)
		if !sf.IsExported() {
			continue
		}
		require.False(t, a.Field(i).IsZero(), "%s.%s is set", path, sf.Name)
		require.True(t, reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()), "%s.%s is kept", path, sf.Name)
	}
}
