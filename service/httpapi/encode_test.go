package httpapi

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAppendAnswerIsJSONMarshal: the body of a check's answer is byte for
// byte what json.Marshal writes of its Response, over random answers:
// limits, waits from a microsecond to years and none, reset instants from
// before the epoch to past year 9999, every state and failure mode, and
// strings that need escaping.
func TestAppendAnswerIsJSONMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 1))
	strs := []string{"", "per-user", "a.b:c_d-9", "<script>", "a&b", `q"uote`, `back\slash`, "tab\t", "é", "\u2028", "\xff"}
	states := []string{"normal", "warning", "throttled"}
	modes := []string{"", "fail_open", "fail_closed", "fallback"}
	floats := []float64{0, 0.001, 1e-7, 1.5e-9, 0.999, 1, 59.001, 3600, 1e20, 1e21, 2.5e22, math.MaxInt64 / 1e9, math.Inf(1), math.NaN()}
	for i := range 5000 {
		a := answerBody{
			allowed: r.IntN(2) == 0, limit: r.Int64N(1 << 62), remaining: r.Int64N(1<<62) - 1<<60,
			rule: strs[r.IntN(len(strs))], state: states[r.IntN(len(states))], degraded: modes[r.IntN(len(modes))],
		}
		if r.IntN(4) == 0 {
			a.state = strs[r.IntN(len(strs))]
		}
		if r.IntN(3) > 0 {
			a.resetAt, a.reset = time.Unix(r.Int64N(1<<38)-1<<37, r.Int64N(1e9)).UTC(), true
		}
		switch r.IntN(3) {
		case 0:
			a.retry = floats[r.IntN(len(floats))]
		case 1:
			a.retry = float64(r.Int64N(1<<40)) / 1000
		default:
			a.never = true
		}
		resp := a.response()
		want, err := json.Marshal(resp)
		got := appendAnswer(nil, &a)
		if err != nil {
			require.Empty(t, got, "case %d %+v: json.Marshal failed (%v): no body either", i, resp, err)
			continue
		}
		require.Equal(t, string(want), string(got), "case %d %+v", i, resp)
	}
}
