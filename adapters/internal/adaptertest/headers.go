package adaptertest

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/httplimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/internal/sftest"
)

// headersAndWarningState: with a limit of 10 a minute, under every
// algorithm, requests 1-8 are normal, 9 and 10 warn (usage above 80%), 11
// is throttled with a problem+json 429; every header says so, and the
// handler never runs for the denied request.
func headersAndWarningState(t *testing.T, h Harness) {
	for _, a := range limitertest.Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			s := h.Start(t, Setup{Limiter: limiter(t, memStore(t), nil, core.PerMinute(10).WithAlgorithm(a))})
			for i := int64(1); i <= 11; i++ {
				sent := time.Now()
				res := s.Do(t, Request{})
				want := map[bool]string{true: "normal", false: "warning"}[i <= 8]
				remaining := 10 - i
				if i == 11 {
					want, remaining = "throttled", 0
				}
				require.Equal(t, want, res.Header.Get(httplimit.HeaderState), "request %d", i)
				checkHeaders(t, res, remaining, sent)
				if i <= 10 {
					require.Equal(t, http.StatusOK, res.Status, "request %d", i)
					require.Equal(t, "hello", res.Body)
					continue
				}
				checkProblem(t, res, "per-ip")
			}
			require.EqualValues(t, 10, s.Runs(), "the handler never runs for a denied request")
		})
	}
}

func ceilSeconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

// checkHeaders checks every rate-limit header of res for the one policy
// "per-ip" of capacity 10 a minute with remaining left, sent at sent.
func checkHeaders(t *testing.T, res Response, remaining int64, sent time.Time) {
	t.Helper()
	h := res.Header
	policies := sftest.List(t, h.Get(httplimit.HeaderRateLimitPolicy))
	require.Len(t, policies, 1)
	require.Equal(t, "per-ip", policies[0].Name)
	require.Equal(t, int64(10), policies[0].Params["q"])
	require.Positive(t, policies[0].Params["w"])
	rl := sftest.List(t, h.Get(httplimit.HeaderRateLimit))
	require.Len(t, rl, 1)
	require.Equal(t, "per-ip", rl[0].Name)
	require.Equal(t, remaining, rl[0].Params["r"])
	tSec := rl[0].Params["t"]
	require.Positive(t, tSec, "t is never 0")

	require.Equal(t, "10", h.Get(httplimit.HeaderLimit))
	require.Equal(t, strconv.FormatInt(remaining, 10), h.Get(httplimit.HeaderRemaining))
	reset, err := strconv.ParseInt(h.Get(httplimit.HeaderReset), 10, 64)
	require.NoError(t, err)
	// Epoch seconds at which the key is whole again: after the request, at
	// most two windows later (a sliding window counter also weighs the
	// previous window).
	require.GreaterOrEqual(t, reset, sent.Unix())
	require.LessOrEqual(t, reset, time.Now().Add(2*time.Minute).Unix()+1)

	if res.Status != http.StatusTooManyRequests {
		// t is until more quota is available: never later than the window.
		require.LessOrEqual(t, tSec, ceilSeconds(time.Minute))
		require.Empty(t, h.Values(httplimit.HeaderRetryAfter))
		return
	}
	require.LessOrEqual(t, tSec, ceilSeconds(time.Minute))
	require.Equal(t, strconv.FormatInt(tSec, 10), h.Get(httplimit.HeaderRetryAfter), "Retry-After == t")
}

type problem struct {
	Type     string   `json:"type"`
	Title    string   `json:"title"`
	Status   int      `json:"status"`
	Detail   string   `json:"detail"`
	Violated []string `json:"violated-policies"`
}

// checkProblem checks that res is the default 429 problem+json naming the
// violated policies.
func checkProblem(t *testing.T, res Response, violated ...string) problem {
	t.Helper()
	require.Equal(t, http.StatusTooManyRequests, res.Status)
	require.Equal(t, httplimit.ProblemContentType, res.Header.Get("Content-Type"))
	require.Equal(t, "no-store", res.Header.Get("Cache-Control"))
	var p problem
	require.NoError(t, json.Unmarshal([]byte(res.Body), &p))
	require.Equal(t, "https://iana.org/assignments/http-problem-types#quota-exceeded", p.Type)
	require.Equal(t, http.StatusTooManyRequests, p.Status)
	require.Equal(t, violated, p.Violated)
	return p
}
