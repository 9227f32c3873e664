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
