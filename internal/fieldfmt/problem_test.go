package fieldfmt

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
)

// The detail of a denial counts its wait in words that agree with the
// number: one second, any other number of seconds, the wait rounded up.
func TestProblemDetailSeconds(t *testing.T) {
	for wait, want := range map[time.Duration]string{
		time.Microsecond:        "retry in 1 second.",
		time.Second:             "retry in 1 second.",
		time.Second + 1:         "retry in 2 seconds.",
		2 * time.Second:         "retry in 2 seconds.",
		59*time.Second + 999999: "retry in 60 seconds.",
		time.Hour:               "retry in 3600 seconds.",
	} {
		d := &core.Decision{Results: []core.PolicyResult{{Policy: "p", Limit: core.PerMinute(5),
			Result: core.Result{Capacity: 5, RetryAfter: wait, ResetAfter: time.Minute, State: core.Throttled}}}}
		var p struct{ Detail string }
		require.NoError(t, json.Unmarshal(Problem(d), &p))
		require.Equal(t, "Rate limit exceeded; "+want, p.Detail, "wait %s", wait)
	}
	require.Equal(t, "0 seconds", string(AppendSeconds(nil, 0)))
	require.Equal(t, "1 second", string(AppendSeconds(nil, 1)))
}

// A violation's text names the limit applied, or says why no wait helps.
func TestViolation(t *testing.T) {
	denied := core.Result{Capacity: 5, RetryAfter: time.Second, State: core.Throttled}
	never := core.Result{Capacity: 5, RetryAfter: core.RetryNever, State: core.Throttled}
	for want, p := range map[string]core.PolicyResult{
		"5 per 1m0s (token_bucket) exceeded":                                                   {Policy: "login", Limit: core.PerMinute(5), Result: denied},
		"cost exceeds the capacity 5; the call can never be admitted":                          {Policy: "login", Limit: core.PerMinute(5), Result: never},
		"no identity for this policy (a missing key); the call cannot be admitted without one": {Policy: "login", Limit: core.PerMinute(5), Unidentified: true, Result: never},
	} {
		require.Equal(t, want, Violation(&p))
	}
}
