package fieldfmt

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
)

// decisionOf is a denied Decision under two policies.
func decisionOf(t *testing.T) *core.Decision {
	t.Helper()
	return &core.Decision{Binding: 1, Results: []core.PolicyResult{
		{Policy: "global", Limit: core.PerMinute(100), Result: core.Result{Allowed: true, Capacity: 100, Remaining: 40, ResetAfter: 36 * time.Second}},
		{Policy: "login", Limit: core.PerMinute(5), Result: core.Result{Capacity: 5, RetryAfter: 11 * time.Second, ResetAfter: time.Minute, State: core.Throttled}},
	}}
}

// Now reads the wall clock: within a second of time.Now, and the zero Time
// when no field needs it.
func TestFormatterNow(t *testing.T) {
	f := NewFormatter(Config{})
	for range 3 {
		before := time.Now()
		now := f.Now()
		require.WithinDuration(t, before, now, time.Second)
		require.False(t, now.Before(before.Add(-time.Millisecond)))
	}
	require.True(t, NewFormatter(Config{Reset: ResetDelta}).Now().IsZero())
	require.True(t, NewFormatter(Config{Omit: XRateLimit}).Now().IsZero())
}

// Build records what Append returns, field by field.
func TestBuildIsAppend(t *testing.T) {
	f := NewFormatter(Config{Reset: ResetDelta})
	d := decisionOf(t)
	want, _ := f.Append(nil, d, time.Time{})
	var fb Builder
	out := f.Build(&fb, nil, d, time.Time{})
	require.Equal(t, want.N, fb.Len())
	for i := range fb.Len() {
		require.Equal(t, want.ID[i], fb.ID(i))
		require.Equal(t, want.Value[i], fb.Value(i, string(out)))
		require.Equal(t, want.Value[i], string(fb.ValueBytes(i, out)))
	}
}

// Build into an array on the caller's stack, read with ValueBytes (as
// Fiber writes the fields), allocates nothing once the texts are cached.
func TestBuildToTheStackAllocatesNothing(t *testing.T) {
	f := NewFormatter(Config{})
	d := decisionOf(t)
	now := time.Now()
	f.Append(nil, d, now) // caches the texts
	n := 0
	allocs := testing.AllocsPerRun(100, func() {
		buf, fb := [128]byte{}, Builder{}
		out := f.Build(&fb, buf[:0], d, now)
		for i := range fb.Len() {
			n += len(fb.ValueBytes(i, out))
		}
	})
	require.Zero(t, allocs)
	require.Positive(t, n)
}

// Append into an array on the caller's stack allocates nothing once the
// policies' texts are cached: the values alias the array, which does not
// escape (fasthttp copies them, so Fiber keeps it on its stack).
func TestAppendToTheStackAllocatesNothing(t *testing.T) {
	f := NewFormatter(Config{})
	d := decisionOf(t)
	now := time.Now()
	f.Append(nil, d, now) // caches the texts
	allocs := testing.AllocsPerRun(100, func() {
		var buf [128]byte
		fields, _ := f.Append(buf[:0], d, now)
		if fields.N != 7 {
			t.Fatalf("%d fields", fields.N)
		}
	})
	require.Zero(t, allocs)
}
