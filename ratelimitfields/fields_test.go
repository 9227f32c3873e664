package ratelimitfields

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/fieldfmt"
)

// The public vocabulary and the formatting code's mirror of it are the
// same numbers and names.
func TestMirrorsTheFormattingCode(t *testing.T) {
	require.Equal(t, fieldfmt.Draft, uint8(Draft))
	require.Equal(t, fieldfmt.XRateLimit, uint8(XRateLimit))
	require.Equal(t, fieldfmt.RetryAfter, uint8(RetryAfter))
	require.Equal(t, fieldfmt.State, uint8(State))
	require.Equal(t, fieldfmt.ResetEpoch, uint8(ResetEpoch))
	require.Equal(t, fieldfmt.ResetDelta, uint8(ResetDelta))
	require.Equal(t, int(fieldfmt.NumFields), MaxFields)
	require.Equal(t, fieldfmt.ProblemContentType, ProblemContentType)
	ids := []uint8{fieldfmt.FieldPolicy, fieldfmt.FieldRateLimit, fieldfmt.FieldLimit, fieldfmt.FieldRemaining, fieldfmt.FieldReset, fieldfmt.FieldState, fieldfmt.FieldRetryAfter}
	fields := []Field{FieldRateLimitPolicy, FieldRateLimit, FieldLimit, FieldRemaining, FieldReset, FieldState, FieldRetryAfter}
	names := []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "X-RateLimit-State", "Retry-After"}
	canonical := []string{"Ratelimit-Policy", "Ratelimit", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "X-Ratelimit-State", "Retry-After"}
	for i, f := range fields {
		require.Equal(t, ids[i], uint8(f))
		require.Equal(t, names[i], f.String())
		require.Equal(t, names[i], fieldfmt.Names[f])
		require.Equal(t, canonical[i], fieldfmt.CanonicalKeys[f], "as net/http canonicalizes it")
	}
	require.Empty(t, Field(MaxFields).String())
}

func decision(allowed bool, r core.Result) *core.Decision {
	r.Allowed = allowed
	return &core.Decision{Allowed: allowed, Results: []core.PolicyResult{{Policy: "p", Limit: core.PerMinute(10), Result: r}}}
}

// Each family is sent unless omitted, in order; Retry-After only on a
// denial that a wait can help; nothing for a Decision without a visible,
// decided policy.
func TestFormatFamilies(t *testing.T) {
	now := time.Unix(1_767_225_600, 0)
	denied := decision(false, core.Result{Capacity: 10, RetryAfter: 6 * time.Second, ResetAfter: time.Minute, State: core.Throttled})
	all := []Field{FieldRateLimitPolicy, FieldRateLimit, FieldLimit, FieldRemaining, FieldReset, FieldState, FieldRetryAfter}
	for _, tc := range []struct {
		c    Config
		want []Field
	}{
		{Config{}, all},
		{Config{Omit: Draft}, all[2:]},
		{Config{Omit: XRateLimit}, []Field{FieldRateLimitPolicy, FieldRateLimit, FieldState, FieldRetryAfter}},
		{Config{Omit: State | RetryAfter}, all[:5]},
		{Config{Omit: Draft | XRateLimit | State | RetryAfter}, nil},
	} {
		f := tc.c.Format(denied, now)
		var got []Field
		for field := range f.All() {
			got = append(got, field)
		}
		require.Equal(t, tc.want, got, "%+v", tc.c)
	}
	f := Config{}.Format(denied, now)
	require.Equal(t, "1767225660", f.Value[4], "epoch seconds")
	require.Equal(t, "60", Config{Reset: ResetDelta}.Format(denied, now).Value[4], "delta seconds")

	never := decision(false, core.Result{Capacity: 10, RetryAfter: core.RetryNever, State: core.Throttled})
	for field := range (Config{}).Format(never, now).All() {
		require.NotEqual(t, FieldRetryAfter, field, "no wait helps")
	}
	wait, isNever := Retry(never)
	require.True(t, isNever)
	require.Contains(t, string(Problem(never)), `"retry":false`)

	shadow := decision(false, core.Result{Capacity: 10, RetryAfter: time.Second})
	shadow.Results[0].Shadow = true
	require.Zero(t, Config{}.Format(shadow, now).N)
	require.Zero(t, Config{}.Format(&core.Decision{Allowed: true}, now).N)
	failed := decision(true, core.Result{Source: core.FailedOpen})
	require.Zero(t, Config{}.Format(failed, now).N, "fail-open: the quota is unknown")

	wait, isNever = Retry(decision(true, core.Result{Capacity: 10, Remaining: 9}))
	require.Zero(t, wait)
	require.False(t, isNever)
}

// All stops when its loop does.
func TestAllStops(t *testing.T) {
	f := Config{}.Format(decision(true, core.Result{Capacity: 10, Remaining: 9, ResetAfter: time.Second}), time.Now())
	require.Equal(t, 6, f.N)
	n := 0
	for range f.All() {
		if n++; n == 2 {
			break
		}
	}
	require.Equal(t, 2, n)
}

// TestResetSaturates: a reset farther away than any
// Duration can hold does not wrap around to "now".
func TestResetSaturates(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 500_000_000, time.UTC)
	for _, after := range []time.Duration{math.MaxInt64, math.MaxInt64 - 1, math.MaxInt64 - 400_000_000, 200 * 365 * 24 * time.Hour} {
		d := &core.Decision{Allowed: true, Results: []core.PolicyResult{{
			Policy: "p", Limit: core.Per(1, 290*365*24*time.Hour),
			Result: core.Result{Allowed: true, Capacity: 1, ResetAfter: after},
		}}}
		f := Config{}.Format(d, now)
		var reset string
		for field, v := range f.All() {
			if field == FieldReset {
				reset = v
			}
		}
		v, err := strconv.ParseInt(reset, 10, 64)
		require.NoError(t, err)
		require.GreaterOrEqual(t, v, now.Unix()+int64(after/time.Second), "reset %s after %s", reset, after)
	}
}
