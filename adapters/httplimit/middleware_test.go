package httplimit_test

import (
	"context"
	"encoding/json"
	"errors"
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
	"github.com/sluicehq/sluice/ratelimitfields"
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

func TestHeaderFamiliesAndResetFormat(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, nil, ipPolicy(t, "p", core.PerMinute(2)))
	h := httplimit.New(l, httplimit.WithHeaders(ratelimitfields.Config{Omit: ratelimitfields.Draft | ratelimitfields.State, Reset: ratelimitfields.ResetDelta}))(ok)
	hdr := get(h, "/", "192.0.2.1:1").Result().Header
	require.Empty(t, hdr.Get("RateLimit"))
	require.Empty(t, hdr.Get("RateLimit-Policy"))
	require.Empty(t, hdr.Get("X-RateLimit-State"))
	require.Equal(t, "30", hdr.Get("X-RateLimit-Reset"))
	get(h, "/", "192.0.2.1:1")
	h2 := httplimit.New(l, httplimit.WithHeaders(ratelimitfields.Config{Omit: ratelimitfields.RetryAfter | ratelimitfields.XRateLimit}))(ok)
	w := get(h2, "/", "192.0.2.1:1")
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	require.Empty(t, w.Result().Header.Get("Retry-After"))
	require.Empty(t, w.Result().Header.Get("X-RateLimit-Limit"))
	require.NotEmpty(t, w.Result().Header.Get("RateLimit"))
}

func TestSkipCostAndKey(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, nil, ipPolicy(t, "p", core.PerMinute(10)))
	h := httplimit.New(l,
		httplimit.WithSkip(func(r *http.Request) bool { return r.URL.Path == "/healthz" }),
		httplimit.WithCost(func(r *http.Request) int64 {
			if r.URL.Path == "/export" {
				return 4
			}
			return 1
		}),
	)(ok)
	for range 20 {
		w := get(h, "/healthz", "192.0.2.9:1")
		require.Equal(t, http.StatusOK, w.Code)
		require.Empty(t, w.Result().Header.Get("RateLimit"))
	}
	require.Equal(t, "6", get(h, "/export", "192.0.2.9:1").Result().Header.Get("X-RateLimit-Remaining"))
	require.Equal(t, "2", get(h, "/export", "192.0.2.9:1").Result().Header.Get("X-RateLimit-Remaining"))
	w := get(h, "/export", "192.0.2.9:1")
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	require.Equal(t, "12", w.Result().Header.Get("Retry-After"), "two more tokens at 6s each")
	// WithKey: an API key header instead of the IP, on this route only.
	keyed := httplimit.New(l, httplimit.WithKey(keyfunc.Header("X-API-Key")))(ok)
	require.Equal(t, "9", get(keyed, "/", "192.0.2.9:1", "X-API-Key", "k1").Result().Header.Get("X-RateLimit-Remaining"))
	require.Equal(t, "9", get(keyed, "/", "192.0.2.9:1", "X-API-Key", "k2").Result().Header.Get("X-RateLimit-Remaining"))
	// No key: fail open by default, no headers, no error text.
	w = get(keyed, "/", "192.0.2.9:1")
	require.Equal(t, http.StatusOK, w.Code)
	require.Equal(t, "hello", w.Body.String())
	require.Empty(t, w.Result().Header.Get("RateLimit"))
}

func TestPerRouteLimits(t *testing.T) {
	f := newFixture(t)
	general := f.limiter(t, nil, ipPolicy(t, "hello", core.PerMinute(10)))
	login := f.limiter(t, nil, ipPolicy(t, "login", core.PerMinute(3)))
	mux := http.NewServeMux()
	mux.Handle("GET /hello", httplimit.New(general)(ok))
	mux.Handle("POST /login", httplimit.New(login)(ok))
	codes := func(method, path string, n int) (out []int) {
		for range n {
			r := httptest.NewRequest(method, path, nil)
			r.RemoteAddr = "192.0.2.50:9"
			w := httptest.NewRecorder()
			mux.ServeHTTP(w, r)
			out = append(out, w.Code)
		}
		return out
	}
	require.Equal(t, []int{200, 200, 200, 429}, codes(http.MethodPost, "/login", 4))
	require.Equal(t, []int{200, 200, 200, 200, 200}, codes(http.MethodGet, "/hello", 5), "the login limit does not touch /hello")
}

// failingStore is a memory store whose backend is down: every Take fails.
type failingStore struct{ core.Store }

func (failingStore) Take(context.Context, []core.Op, []core.Result) error {
	return errors.New("dial tcp 10.0.0.1:6379: connection refused")
}

func TestStoreFailure(t *testing.T) {
	ip := keyfunc.IP()
	l, err := core.NewLimiter(failingStore{newFixture(t).store}, []core.Policy{{Name: "p", Key: ip, Limit: core.PerMinute(1)}})
	require.NoError(t, err)
	// Default: fail open, nothing of the error reaches the client.
	w := get(httplimit.New(l)(ok), "/", "192.0.2.1:1")
	require.Equal(t, http.StatusOK, w.Code)
	require.Equal(t, "hello", w.Body.String())
	require.Empty(t, w.Result().Header.Get("RateLimit"))
	// An error handler decides otherwise.
	var got error
	h := httplimit.New(l, httplimit.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) bool {
		got = err
		w.WriteHeader(http.StatusServiceUnavailable)
		return false
	}))(ok)
	w = get(h, "/", "192.0.2.1:1")
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	require.NotContains(t, w.Body.String(), "connection refused")
	require.ErrorContains(t, got, "connection refused")
}

func TestSpoofedAddressesKeepTheirOwnBucket(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, nil, ipPolicy(t, "p", core.PerMinute(2)))
	h := httplimit.New(l)(ok)
	// The attacker rotates X-Forwarded-For and Forwarded: with no trusted
	// proxy they are ignored and it stays in its own bucket.
	var codes []int
	for i := range 4 {
		codes = append(codes, get(h, "/", "203.0.113.66:5000",
			"X-Forwarded-For", fmt.Sprintf("10.0.0.%d", i), "Forwarded", fmt.Sprintf("for=10.1.0.%d", i), "X-Real-IP", "10.2.0.1").Code)
	}
	require.Equal(t, []int{200, 200, 429, 429}, codes)
	// A neighbour is not affected.
	require.Equal(t, 200, get(h, "/", "203.0.113.67:5000").Code)
	// Garbage and huge headers: no panic, a decision.
	huge := strings.Repeat("1.2.3.4, ", 100_000)
	require.Equal(t, 429, get(h, "/", "203.0.113.66:5000", "X-Forwarded-For", huge, "Forwarded", `for="[::1`).Code)
	// No usable peer: fail open by default (documented), never a shared bucket.
	w := get(h, "/", "not-an-address")
	require.Equal(t, 200, w.Code)
	require.Empty(t, w.Result().Header.Get("RateLimit"))
}
