package adaptertest

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/internal/sftest"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/ratelimitfields"
)

// headersAndWarningState: with a limit of 10 a minute, under every
// algorithm, requests 1-8 are normal, 9 and 10 warn (usage above 80%), 11
// is throttled with a problem+json 429; every header says so, and the
// handler never runs for the denied request.
func headersAndWarningState(t *testing.T, h Harness) {
	for _, a := range limitertest.Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			// A fake clock: under the real one, a window boundary between
			// requests would move the sliding window counter's weights.
			clock := limitertest.NewClock()
			s := h.Start(t, Setup{Limiter: limiter(t, clockStore(t, clock), nil, core.PerMinute(10).WithAlgorithm(a))})
			for i := int64(1); i <= 11; i++ {
				// X-RateLimit-Reset is on the store's clock: the instant
				// the store decided at plus the wait until the key is whole.
				sent := clock.Now()
				res := s.Do(t, Request{})
				want := map[bool]string{true: "normal", false: "warning"}[i <= 8]
				remaining := 10 - i
				if i == 11 {
					want, remaining = "throttled", 0
				}
				require.Equal(t, want, res.Header.Get("X-RateLimit-State"), "request %d", i)
				checkHeaders(t, res, remaining, sent)
				if a == core.TokenBucket && i <= 10 {
					// A token every 6 s: whole again 6 s per token used,
					// in epoch seconds from the instant the store decided.
					reset, err := strconv.ParseInt(res.Header.Get("X-RateLimit-Reset"), 10, 64)
					require.NoError(t, err)
					require.Equal(t, sent.Unix()+6*i, reset, "request %d", i)
					// t: until more quota is available, the next token.
					require.Equal(t, int64(6), sftest.List(t, res.Header.Get("RateLimit"))[0].Params["t"])
				}
				if i <= 10 {
					require.Equal(t, http.StatusOK, res.Status, "request %d", i)
					if !res.RPC {
						require.Equal(t, "hello", res.Body)
					}
					continue
				}
				checkProblem(t, res, "per-ip")
			}
			require.EqualValues(t, 10, s.Runs(), "the handler never runs for a denied request")
		})
	}
}

// checkHeaders checks every rate-limit header of res for the one policy
// "per-ip" of capacity 10 a minute with remaining left, decided at sent
// on the store's clock.
func checkHeaders(t *testing.T, res Response, remaining int64, sent time.Time) {
	t.Helper()
	h := res.Header
	policies := sftest.List(t, h.Get("RateLimit-Policy"))
	require.Len(t, policies, 1)
	require.Equal(t, "per-ip", policies[0].Name)
	require.Equal(t, map[string]int64{"q": 10, "w": 60}, policies[0].Params)
	rl := sftest.List(t, h.Get("RateLimit"))
	require.Len(t, rl, 1)
	require.Equal(t, "per-ip", rl[0].Name)
	require.Equal(t, remaining, rl[0].Params["r"])
	for k := range rl[0].Params {
		require.Contains(t, []string{"r", "t"}, k, "RateLimit's parameters")
	}
	tSec := rl[0].Params["t"]
	require.Positive(t, tSec, "t is never 0")
	// t is never past the key's fresh instant: at most the window, or two
	// for a sliding window counter (its quota can come back only in the
	// next window)
	require.LessOrEqual(t, tSec, int64(120), "t is never more than two windows")

	require.Equal(t, "10", h.Get("X-RateLimit-Limit"))
	require.Equal(t, strconv.FormatInt(remaining, 10), h.Get("X-RateLimit-Remaining"))
	reset, err := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
	require.NoError(t, err)
	// Epoch seconds at which the key is whole again: after the request, at
	// most two windows later (a sliding window counter also weighs the
	// previous window).
	require.Greater(t, reset, sent.Unix())
	require.LessOrEqual(t, reset, sent.Add(2*time.Minute).Unix())
	require.LessOrEqual(t, sent.Unix()+tSec, reset+1, "t is never past the fresh instant")
	for _, name := range []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit",
		"X-RateLimit-Remaining", "X-RateLimit-Reset", "X-RateLimit-State"} {
		require.Len(t, h.Values(name), 1, name)
	}

	if res.Status != http.StatusTooManyRequests {
		// t is until more quota is available.
		require.Empty(t, h.Values("Retry-After"))
		return
	}
	// t is the wait, as Retry-After: the exact wait rounded up, which can
	// be more than the window (a drained sliding window counter's quota
	// comes back in the next window)
	ra, err := strconv.ParseInt(h.Get("Retry-After"), 10, 64)
	require.NoError(t, err)
	require.Equal(t, ra, tSec, "t = Retry-After")
}

type problem struct {
	Type     string   `json:"type"`
	Title    string   `json:"title"`
	Status   int      `json:"status"`
	Detail   string   `json:"detail"`
	Violated []string `json:"violated-policies"`
}

// checkProblem checks that res is the default 429 problem+json naming the
// violated policies (a gRPC call's: that it was refused as exhausted).
func checkProblem(t *testing.T, res Response, violated ...string) problem {
	t.Helper()
	require.Equal(t, http.StatusTooManyRequests, res.Status)
	if res.RPC {
		return problem{}
	}
	require.Equal(t, ratelimitfields.ProblemContentType, res.Header.Get("Content-Type"))
	require.Equal(t, "no-store", res.Header.Get("Cache-Control"))
	var p problem
	require.NoError(t, json.Unmarshal([]byte(res.Body), &p))
	require.Equal(t, "https://iana.org/assignments/http-problem-types#quota-exceeded", p.Type)
	require.Equal(t, http.StatusTooManyRequests, p.Status)
	require.Equal(t, violated, p.Violated)
	return p
}

// severalPolicies: with two policies, RateLimit-Policy lists both,
// RateLimit follows the binding one, and a denial names only the policy
// that denied, with its Retry-After; the denying policy refills with time.
func severalPolicies(t *testing.T, h Harness) {
	clock := limitertest.NewClock()
	st := clockStore(t, clock)
	ip := keyfunc.IP()
	l, err := core.NewLimiter(st, []core.Policy{
		{Name: "per-minute", Key: ip, Limit: core.PerMinute(100)},
		{Name: "burst", Key: ip, Limit: core.PerSecond(2)},
	})
	require.NoError(t, err)
	s := h.Start(t, Setup{Limiter: l})
	for i := 1; i <= 4; i++ {
		if i == 4 {
			clock.Advance(time.Second)
		}
		res := s.Do(t, Request{})
		require.Equal(t, `"per-minute";q=100;w=60, "burst";q=2;w=1`, res.Header.Get("RateLimit-Policy"), "request %d", i)
		rl := sftest.List(t, res.Header.Get("RateLimit"))
		require.Len(t, rl, 1)
		require.Equal(t, "burst", rl[0].Name, "request %d: 1/2 left is tighter than 99/100", i)
		if i != 3 {
			require.Equal(t, http.StatusOK, res.Status, "request %d", i)
			continue
		}
		if p := checkProblem(t, res, "burst"); !res.RPC {
			require.Equal(t, "Rate limit exceeded; retry in 1 second.", p.Detail)
		}
		require.Equal(t, "1", res.Header.Get("Retry-After"))
	}
	require.EqualValues(t, 3, s.Runs())
}

// clockStore is a memory store on clock.
func clockStore(t *testing.T, clock *limitertest.Clock) core.Store {
	t.Helper()
	st, err := memorystore.New(memorystore.WithClock(clock.Now))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return st
}
