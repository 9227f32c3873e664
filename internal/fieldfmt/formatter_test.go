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

// Now is the binding policy's decision instant (the store's clock, to
// which ResetAfter is relative) when a store decided, and otherwise reads
// the wall clock: within a second of time.Now. It is the zero Time when no
// field needs it.
func TestFormatterNow(t *testing.T) {
	f := NewFormatter(Config{})
	d := decisionOf(t)
	d.Results[1].At = 1_700_000_000_123_456
	d.Results[0].At = 1_600_000_000_000_000 // not the binding policy
	require.Equal(t, time.UnixMicro(1_700_000_000_123_456), f.Now(d))
	require.Equal(t, int64(1_700_000_061), epochReset(f.Now(d), d.Results[1].ResetAfter), "a minute after the decision, rounded up")
	d.Results[1].At = 0 // a failure policy answered: no store's clock
	for range 3 {
		before := time.Now()
		now := f.Now(d)
		require.WithinDuration(t, before, now, time.Second)
		require.False(t, now.Before(before.Add(-time.Millisecond)))
	}
	require.WithinDuration(t, time.Now(), f.Now(&core.Decision{}), time.Second, "no results")
	require.True(t, NewFormatter(Config{Reset: ResetDelta}).Now(d).IsZero())
	require.True(t, NewFormatter(Config{Omit: XRateLimit}).Now(d).IsZero())
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
