package httplimit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/httplimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/internal/sftest"
	"github.com/sluicehq/sluice/keyfunc"
)

type fixture struct {
	now   time.Time
	mu    sync.Mutex
	store *memorystore.Store
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	s, err := memorystore.New(memorystore.WithClock(func() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	f.store = s
	return f
}

func (f *fixture) limiter(t *testing.T, opts []core.LimiterOption, ps ...core.Policy) *core.Limiter {
	l, err := core.NewLimiter(f.store, ps, opts...)
	require.NoError(t, err)
	return l
}

func ipPolicy(t *testing.T, name string, l core.Limit) core.Policy {
	ip := keyfunc.IP()
	return core.Policy{Name: name, Key: ip, Limit: l}
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") })

func get(h http.Handler, path, remote string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestHeadersFollowTheDecision(t *testing.T) {
	f := newFixture(t)
	var warned, changes []string
	l := f.limiter(t, []core.LimiterOption{
		core.OnWarning(func(_ context.Context, _ keyfunc.Request, p core.PolicyResult) { warned = append(warned, p.Policy) }),
		core.OnStateChange(func(_ context.Context, _ keyfunc.Request, p core.PolicyResult) {
			changes = append(changes, p.Previous.String()+">"+p.State.String())
		}),
	}, ipPolicy(t, "per-ip", core.PerMinute(10)))
	var seen *core.Decision
	h := httplimit.New(l)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, found := httplimit.DecisionFrom(r.Context())
		require.True(t, found)
		seen = d
		fmt.Fprint(w, "hello")
	}))
	for i := 1; i <= 11; i++ {
		w := get(h, "/hello", "203.0.113.7:4242")
		hdr := w.Result().Header
		pol := sftest.List(t, hdr.Get("RateLimit-Policy"))
		require.Equal(t, []sftest.Member{{Name: "per-ip", Params: map[string]int64{"q": 10, "w": 60}}}, pol)
		rl := sftest.List(t, hdr.Get("RateLimit"))
		require.Len(t, rl, 1)
		require.Equal(t, "per-ip", rl[0].Name)
		require.Equal(t, "10", hdr.Get("X-RateLimit-Limit"))
		state := hdr.Get("X-RateLimit-State")
		switch {
		case i <= 8:
			require.Equal(t, "normal", state, "request %d", i)
		case i <= 10:
			require.Equal(t, "warning", state, "request %d", i)
		default:
			require.Equal(t, "throttled", state, "request %d", i)
		}
		if i <= 10 {
			require.Equal(t, http.StatusOK, w.Code)
			require.Equal(t, int64(10-i), rl[0].Params["r"])
			require.Equal(t, strconv.Itoa(10-i), hdr.Get("X-RateLimit-Remaining"))
			require.Equal(t, seen.Bound().Remaining, rl[0].Params["r"])
			// t: until more quota is available (the draft's meaning): the
			// next token, 6s away on a frozen clock; X-RateLimit-Reset
			// below is until the quota is whole again.
			require.Equal(t, int64(6), rl[0].Params["t"])
			require.Empty(t, hdr.Get("Retry-After"))
			// epoch seconds from the host clock: now + 6s per request used
			reset, err := strconv.ParseInt(hdr.Get("X-RateLimit-Reset"), 10, 64)
			require.NoError(t, err)
			require.InDelta(t, time.Now().Unix()+int64(6*i), reset, 1)
			continue
		}
		require.Equal(t, http.StatusTooManyRequests, w.Code)
		require.Equal(t, "6", hdr.Get("Retry-After"))
		require.Equal(t, int64(6), rl[0].Params["t"], "Retry-After == t")
		require.Equal(t, int64(0), rl[0].Params["r"])
		require.Equal(t, "application/problem+json", hdr.Get("Content-Type"))
		var body map[string]any
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body))
		require.Equal(t, "https://iana.org/assignments/http-problem-types#quota-exceeded", body["type"])
		require.Equal(t, float64(429), body["status"])
		require.Equal(t, []any{"per-ip"}, body["violated-policies"])
	}
	require.Equal(t, []string{"per-ip"}, warned, "OnWarning fires once, entering Warning")
	require.Equal(t, []string{"normal>warning", "warning>throttled"}, changes)
	// Time passes: one token back, and Retry-After was exact.
	f.now = f.now.Add(6 * time.Second)
	require.Equal(t, http.StatusOK, get(h, "/hello", "203.0.113.7:4242").Code)
}

func TestSeveralPoliciesAndTheBindingOne(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, nil,
		ipPolicy(t, "burst", core.PerSecond(5)),
		ipPolicy(t, "hourly", core.PerHour(8).WithAlgorithm(core.FixedWindow)))
	h := httplimit.New(l)(ok)
	var w *httptest.ResponseRecorder
	for range 4 {
		w = get(h, "/", "198.51.100.1:1")
	}
	hdr := w.Result().Header
	pol := sftest.List(t, hdr.Get("RateLimit-Policy"))
	require.Equal(t, []sftest.Member{{Name: "burst", Params: map[string]int64{"q": 5, "w": 1}}, {Name: "hourly", Params: map[string]int64{"q": 8, "w": 3600}}}, pol)
	rl := sftest.List(t, hdr.Get("RateLimit"))
	require.Equal(t, "burst", rl[0].Name, "1/5 left is tighter than 4/8")
	f.now = f.now.Add(2 * time.Second)
	for range 4 {
		w = get(h, "/", "198.51.100.1:1")
	}
	require.Equal(t, http.StatusOK, w.Code)
	rl = sftest.List(t, w.Result().Header.Get("RateLimit"))
	require.Equal(t, "hourly", rl[0].Name, "0/8 left now binds")
	w = get(h, "/", "198.51.100.1:1")
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	require.Contains(t, w.Body.String(), `"violated-policies":["hourly"]`)
	require.Equal(t, "3598", w.Result().Header.Get("Retry-After"), "the aligned hour ends 3598s after 12:00:02")
}

// Huge and garbage forwarding headers still get a decision, and a peer
// that is no address fails open (documented), never a shared bucket. (A
// client's spoofed headers and a neighbour: the conformance suite.)
func TestHugeHeadersAndNoPeer(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, nil, ipPolicy(t, "p", core.PerMinute(1)))
	h := httplimit.New(l)(ok)
	require.Equal(t, 200, get(h, "/", "203.0.113.66:5000").Code)
	huge := strings.Repeat("1.2.3.4, ", 100_000)
	require.Equal(t, 429, get(h, "/", "203.0.113.66:5000", "X-Forwarded-For", huge, "Forwarded", `for="[::1`).Code)
	w := get(h, "/", "not-an-address")
	require.Equal(t, 200, w.Code)
	require.Empty(t, w.Result().Header.Get("RateLimit"))
}
