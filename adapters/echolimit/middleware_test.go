package echolimit_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/echolimit"
	"github.com/sluicehq/sluice/adapters/httplimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/internal/sftest"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/ratelimitfields"
)

// fixture is a memory store on a clock the test moves.
type fixture struct {
	mu    sync.Mutex
	now   time.Time
	store *memorystore.Store
}

func newFixture(t testing.TB) *fixture {
	f := &fixture{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	s, err := memorystore.New(memorystore.WithClock(func() time.Time {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.now
	}))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	f.store = s
	return f
}

func (f *fixture) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

func (f *fixture) limiter(t testing.TB, ps ...core.Policy) *core.Limiter {
	l, err := core.NewLimiter(f.store, ps)
	require.NoError(t, err)
	return l
}

func ipPolicy(t testing.TB, name string, l core.Limit) core.Policy {
	ip := keyfunc.IP()
	return core.Policy{Name: name, Key: ip, Limit: l}
}

func newEcho() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	return e
}

type req struct {
	method, target, remote string
	header                 http.Header
}

func do(h http.Handler, r req) *httptest.ResponseRecorder {
	if r.method == "" {
		r.method = http.MethodGet
	}
	hr := httptest.NewRequest(r.method, r.target, nil)
	if r.remote != "" {
		hr.RemoteAddr = r.remote
	}
	for k, v := range r.header {
		hr.Header[k] = v
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, hr)
	return w
}

func get(h http.Handler, target, remote string) *httptest.ResponseRecorder {
	return do(h, req{target: target, remote: remote})
}

// recorder keeps the Decision of every request, allowed or denied.
type recorder struct {
	mu        sync.Mutex
	decisions []*core.Decision
}

func (rec *recorder) keep(c echo.Context) {
	d, ok := echolimit.DecisionFrom(c)
	if !ok {
		panic("no decision")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.decisions = append(rec.decisions, d)
}

func (rec *recorder) last() *core.Decision {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.decisions[len(rec.decisions)-1]
}

func hello(c echo.Context) error { return c.String(http.StatusOK, "hello") }

func ceilSeconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

// checkHeaders checks every rate-limit header of w against d.
func checkHeaders(t *testing.T, w *httptest.ResponseRecorder, d *core.Decision, sent time.Time) {
	t.Helper()
	h := w.Header()
	b := d.Bound()

	policies := sftest.List(t, h.Get("RateLimit-Policy"))
	require.Len(t, policies, len(d.Results))
	for i, p := range policies {
		require.Equal(t, d.Results[i].Policy, p.Name)
		require.Equal(t, d.Results[i].Limit.Capacity(), p.Params["q"])
		require.Positive(t, p.Params["w"])
	}
	rl := sftest.List(t, h.Get("RateLimit"))
	require.Len(t, rl, 1)
	require.Equal(t, b.Policy, rl[0].Name)
	require.Equal(t, b.Remaining, rl[0].Params["r"])
	tSec := rl[0].Params["t"]

	require.Equal(t, strconv.FormatInt(b.Limit.Capacity(), 10), h.Get("X-RateLimit-Limit"))
	require.Equal(t, strconv.FormatInt(b.Remaining, 10), h.Get("X-RateLimit-Remaining"))
	reset, err := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
	require.NoError(t, err)
	require.GreaterOrEqual(t, reset, sent.Add(b.ResetAfter).Unix())
	require.LessOrEqual(t, reset, time.Now().Add(b.ResetAfter).Unix()+1)
	require.Equal(t, d.State().String(), h.Get("X-RateLimit-State"))

	if d.Allowed {
		// t is until more quota is available: never later than the key is
		// whole again, nor than the window (exact values per algorithm:
		// httplimit's TestTUntilMoreQuota).
		require.Positive(t, tSec)
		require.LessOrEqual(t, tSec, ceilSeconds(b.ResetAfter))
		require.Empty(t, h.Values("Retry-After"))
		return
	}
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	require.Equal(t, ceilSeconds(b.RetryAfter), tSec)
	require.Positive(t, tSec, "t is never 0 while limited")
	require.Equal(t, strconv.FormatInt(tSec, 10), h.Get("Retry-After"), "Retry-After == t")
}

type problem struct {
	Type     string   `json:"type"`
	Title    string   `json:"title"`
	Status   int      `json:"status"`
	Detail   string   `json:"detail"`
	Violated []string `json:"violated-policies"`
}

func checkProblem(t *testing.T, w *httptest.ResponseRecorder, violated ...string) problem {
	t.Helper()
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	require.Equal(t, ratelimitfields.ProblemContentType, w.Header().Get(echo.HeaderContentType))
	require.Equal(t, "no-store", w.Header().Get("Cache-Control"))
	var p problem
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &p))
	require.Equal(t, "https://iana.org/assignments/http-problem-types#quota-exceeded", p.Type)
	require.Equal(t, http.StatusTooManyRequests, p.Status)
	require.Equal(t, violated, p.Violated)
	return p
}

// Limit 10: requests 1-8 are normal, 9 and 10 warn (usage above 80%), 11 is
// throttled; every header agrees with the Decision.
func TestHeadersFollowTheDecision(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, ipPolicy(t, "per-ip", core.PerMinute(10)))
	var rec recorder
	var ran atomic.Int32
	e := newEcho()
	e.Use(echolimit.New(l, echolimit.WithDeniedHandler(func(c echo.Context) error {
		rec.keep(c)
		return echolimit.DeniedHandler(c)
	})))
	e.GET("/hello", func(c echo.Context) error { rec.keep(c); ran.Add(1); return hello(c) })

	for i := 1; i <= 11; i++ {
		sent := time.Now()
		w := get(e, "/hello", "203.0.113.7:4000")
		d := rec.last()
		checkHeaders(t, w, d, sent)
		want := map[bool]string{true: "normal", false: "warning"}[i <= 8]
		if i == 11 {
			want = "throttled"
		}
		require.Equal(t, want, w.Header().Get("X-RateLimit-State"), "request %d", i)
		if i <= 10 {
			require.Equal(t, http.StatusOK, w.Code, "request %d", i)
			require.Equal(t, "hello", w.Body.String())
			require.Equal(t, int64(10-i), d.Bound().Remaining)
			continue
		}
		p := checkProblem(t, w, "per-ip")
		require.Equal(t, "Rate limit exceeded; retry in 6 seconds.", p.Detail) // one token per 6s
		require.Equal(t, "6", w.Header().Get("Retry-After"))
	}
	require.EqualValues(t, 10, ran.Load(), "the handler never runs for a denied request")

	require.Equal(t, http.StatusOK, get(e, "/hello", "198.51.100.1:4000").Code)
	f.advance(6 * time.Second)
	w := get(e, "/hello", "203.0.113.7:4000")
	require.Equal(t, http.StatusOK, w.Code)
	require.Equal(t, "warning", w.Header().Get("X-RateLimit-State"))
}

// A denial goes through e.HTTPErrorHandler: a custom one sees the 429 and
// renders it its own way; one that delegates to Echo's default gets the
// problem document; HEAD gets no body.
func TestDenialTakesTheErrorPath(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, ipPolicy(t, "per-ip", core.PerMinute(1)))

	t.Run("custom error handler", func(t *testing.T) {
		var seen []error
		e := newEcho()
		e.HTTPErrorHandler = func(err error, c echo.Context) {
			seen = append(seen, err)
			var he *echo.HTTPError
			require.ErrorAs(t, err, &he)
			d, ok := echolimit.DecisionFrom(c)
			require.True(t, ok)
			require.False(t, d.Allowed)
			require.NoError(t, c.String(he.Code, fmt.Sprintf("%v", he.Message)))
		}
		e.Use(echolimit.New(l))
		e.GET("/", hello)
		require.Equal(t, http.StatusOK, get(e, "/", "203.0.113.1:1").Code)
		w := get(e, "/", "203.0.113.1:1")
		require.Len(t, seen, 1)
		require.Equal(t, http.StatusTooManyRequests, seen[0].(*echo.HTTPError).Code)
		require.Equal(t, "code=429, message=Too Many Requests", seen[0].Error())
		require.Equal(t, http.StatusTooManyRequests, w.Code)
		require.Equal(t, "Too Many Requests", w.Body.String())
		require.Equal(t, echo.MIMETextPlainCharsetUTF8, w.Header().Get(echo.HeaderContentType), "not relabelled")
		require.Equal(t, "60", w.Header().Get("Retry-After"))
		require.Equal(t, "throttled", w.Header().Get("X-RateLimit-State"))
	})

	t.Run("custom error handler delegating to the default", func(t *testing.T) {
		var logged atomic.Int32
		e := newEcho()
		e.HTTPErrorHandler = func(err error, c echo.Context) {
			logged.Add(1)
			e.DefaultHTTPErrorHandler(err, c)
		}
		e.Use(echolimit.New(l))
		e.GET("/", hello)
		get(e, "/", "203.0.113.2:1")
		checkProblem(t, get(e, "/", "203.0.113.2:1"), "per-ip")
		require.EqualValues(t, 1, logged.Load())
	})

	t.Run("debug mode indents", func(t *testing.T) {
		e := newEcho()
		e.Debug = true
		e.Use(echolimit.New(l))
		e.GET("/", hello)
		get(e, "/", "203.0.113.3:1")
		w := get(e, "/", "203.0.113.3:1")
		checkProblem(t, w, "per-ip")
		require.Contains(t, w.Body.String(), "\n  \"title\"")
	})

	t.Run("HEAD", func(t *testing.T) {
		e := newEcho()
		e.Use(echolimit.New(l))
		e.HEAD("/", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
		do(e, req{method: http.MethodHead, target: "/", remote: "203.0.113.4:1"})
		w := do(e, req{method: http.MethodHead, target: "/", remote: "203.0.113.4:1"})
		require.Equal(t, http.StatusTooManyRequests, w.Code)
		require.Empty(t, w.Body.String())
		require.Equal(t, "60", w.Header().Get("Retry-After"))
		// As in every other adapter (issue 12 item 17d).
		require.Equal(t, ratelimitfields.ProblemContentType, w.Header().Get(echo.HeaderContentType))
		require.Equal(t, "no-store", w.Header().Get("Cache-Control"))
	})

	// A custom handler that puts the problem inside its own JSON envelope
	// writes a body that is not a problem document: it must not be
	// labelled application/problem+json (issue 12 item 17d).
	t.Run("custom JSON envelope is not relabelled", func(t *testing.T) {
		for _, method := range []string{http.MethodGet, http.MethodHead} {
			e := newEcho()
			e.HTTPErrorHandler = func(err error, c echo.Context) {
				var he *echo.HTTPError
				require.ErrorAs(t, err, &he)
				if c.Request().Method == http.MethodHead {
					require.NoError(t, c.NoContent(he.Code))
					return
				}
				require.NoError(t, c.JSON(he.Code, map[string]any{"error": he.Message, "app": "mine"}))
			}
			e.Use(echolimit.New(l))
			e.Any("/", hello)
			remote := "203.0.113.9:1"
			if method == http.MethodHead {
				remote = "203.0.113.10:1"
			}
			do(e, req{method: method, target: "/", remote: remote})
			w := do(e, req{method: method, target: "/", remote: remote})
			require.Equal(t, http.StatusTooManyRequests, w.Code, method)
			require.NotEqual(t, ratelimitfields.ProblemContentType, w.Header().Get(echo.HeaderContentType), method)
			require.Equal(t, "no-store", w.Header().Get("Cache-Control"), "a 429 is never stored (%s)", method)
			if method == http.MethodGet {
				require.Equal(t, echo.MIMEApplicationJSON, w.Header().Get(echo.HeaderContentType))
				require.Contains(t, w.Body.String(), `"app":"mine"`)
				require.Contains(t, w.Body.String(), `"error":{"type":`)
			}
		}
	})

	t.Run("other middleware sees the error", func(t *testing.T) {
		var got error
		e := newEcho()
		e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c echo.Context) error { got = next(c); return got }
		})
		e.Use(echolimit.New(l))
		e.GET("/", hello)
		get(e, "/", "203.0.113.5:1")
		checkProblem(t, get(e, "/", "203.0.113.5:1"), "per-ip")
		require.ErrorAs(t, got, new(*echo.HTTPError))
	})
}

// A request with no client address cannot be decided: the default is to
// let it through without headers and log; an error handler answers
// instead. (Other undecided requests: the conformance suite.)
func TestUndecided(t *testing.T) {
	f := newFixture(t)
	healthy := f.limiter(t, ipPolicy(t, "per-ip", core.PerMinute(10)))

	cases := []struct {
		name    string
		limiter *core.Limiter
		remote  string
		is      error
	}{
		{"no client address", healthy, "@", keyfunc.ErrNoKey},
	}
	for _, tc := range cases {
		t.Run(tc.name+"/fail open", func(t *testing.T) {
			var logs bytes.Buffer
			e := newEcho()
			e.Use(echolimit.New(tc.limiter, echolimit.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))))
			e.GET("/", hello)
			w := get(e, "/", tc.remote)
			require.Equal(t, http.StatusOK, w.Code)
			require.Equal(t, "hello", w.Body.String())
			for _, name := range []string{"RateLimit", "RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-State"} {
				require.Empty(t, w.Header().Values(name))
			}
			require.Contains(t, logs.String(), "sluice: request not rate limited")
		})
		t.Run(tc.name+"/error handler", func(t *testing.T) {
			var got error
			e := newEcho()
			e.Use(echolimit.New(tc.limiter, echolimit.WithErrorHandler(func(c echo.Context, err error) (bool, error) {
				got = err
				return false, echo.ErrServiceUnavailable
			})))
			e.GET("/", func(c echo.Context) error { t.Error("handler ran after the error handler"); return nil })
			w := get(e, "/", tc.remote)
			require.Equal(t, http.StatusServiceUnavailable, w.Code)
			require.NotContains(t, w.Body.String(), "backend", "no error text reaches the client")
			require.ErrorIs(t, got, tc.is)
		})
	}
}

func TestPerRouteLimits(t *testing.T) {
	f := newFixture(t)
	global := f.limiter(t, ipPolicy(t, "per-ip", core.PerMinute(100)))
	login := f.limiter(t, ipPolicy(t, "login", core.PerMinute(2)))
	api := f.limiter(t, ipPolicy(t, "api", core.PerMinute(3)))

	e := newEcho()
	e.Use(echolimit.New(global))
	e.GET("/login", hello, echolimit.New(login))
	quiet := slog.New(slog.DiscardHandler)
	g := e.Group("/api", echolimit.New(api, echolimit.WithKey(keyfunc.Header("X-API-Key")), echolimit.WithLogger(quiet)))
	g.GET("/items", hello)
	e.GET("/hello", hello)

	for range 2 {
		require.Equal(t, http.StatusOK, get(e, "/login", "203.0.113.7:1").Code)
	}
	w := get(e, "/login", "203.0.113.7:1")
	checkProblem(t, w, "login")
	// Stacked, the route's limiter merges with the global one: both
	// policies are listed, the denying one binds.
	require.Equal(t, `"per-ip";q=100;w=60, "login";q=2;w=60`, w.Header().Get("RateLimit-Policy"))
	require.Equal(t, http.StatusOK, get(e, "/hello", "203.0.113.7:1").Code, "other routes are unaffected")
	require.Equal(t, http.StatusOK, get(e, "/login", "198.51.100.1:1").Code, "other clients are unaffected")

	key := func(k, remote string) *httptest.ResponseRecorder {
		return do(e, req{target: "/api/items", remote: remote, header: http.Header{"X-Api-Key": {k}}})
	}
	require.Equal(t, "2", key("k1", "203.0.113.7:1").Header().Get("X-RateLimit-Remaining"))
	require.Equal(t, "1", key("k1", "198.51.100.1:1").Header().Get("X-RateLimit-Remaining"))
	require.Equal(t, "0", key("k1", "192.0.2.1:1").Header().Get("X-RateLimit-Remaining"))
	checkProblem(t, key("k1", "192.0.2.2:1"), "api")
	require.Equal(t, "2", key("k2", "203.0.113.7:1").Header().Get("X-RateLimit-Remaining"))

	require.Equal(t, http.StatusOK, get(e, "/api/items", "203.0.113.7:1").Code)
}

func TestRouteIsTheTemplate(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, core.Policy{Name: "per-route", Key: keyfunc.Route(), Limit: core.PerMinute(2)})
	e := newEcho()
	e.Use(echolimit.New(l))
	e.GET("/users/:id", hello)

	require.Equal(t, "1", get(e, "/users/1", "203.0.113.7:1").Header().Get("X-RateLimit-Remaining"))
	require.Equal(t, "0", get(e, "/users/2", "198.51.100.1:1").Header().Get("X-RateLimit-Remaining"))
	require.Equal(t, http.StatusTooManyRequests, get(e, "/users/3", "192.0.2.1:1").Code)

	w := get(e, "/nowhere", "203.0.113.7:1")
	require.Equal(t, http.StatusNotFound, w.Code)
	require.Equal(t, "1", w.Header().Get("X-RateLimit-Remaining"))
}

func TestDecisionInHandler(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, ipPolicy(t, "per-ip", core.PerMinute(10)))
	e := newEcho()
	e.Use(echolimit.New(l))
	e.GET("/", func(c echo.Context) error {
		d, ok := echolimit.DecisionFrom(c)
		require.True(t, ok)
		require.Same(t, d, c.Get(echolimit.DecisionKey))
		hd, ok := httplimit.DecisionFrom(c.Request().Context())
		require.True(t, ok, "the Decision is in the request context")
		require.Same(t, d, hd)
		return c.String(http.StatusOK, fmt.Sprintf("%s %d", d.State(), d.Bound().Remaining))
	})
	var w *httptest.ResponseRecorder
	for range 9 {
		w = get(e, "/", "203.0.113.7:1")
	}
	require.Equal(t, "warning 1", w.Body.String())

	c := e.NewContext(httptest.NewRequest(http.MethodGet, "/", nil), httptest.NewRecorder())
	_, ok := echolimit.DecisionFrom(c)
	require.False(t, ok)
}

func TestDeniedHandler(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, ipPolicy(t, "per-ip", core.PerMinute(1)))
	e := newEcho()
	e.Use(echolimit.New(l, echolimit.WithDeniedHandler(func(c echo.Context) error {
		d, ok := echolimit.DecisionFrom(c)
		require.True(t, ok)
		require.False(t, d.Allowed)
		require.NotEmpty(t, c.Response().Header().Get("Retry-After"), "headers are set before the denied handler")
		return c.JSON(http.StatusTooManyRequests, echo.Map{"error": "slow down"})
	})))
	var ran atomic.Int32
	e.GET("/", func(c echo.Context) error { ran.Add(1); return hello(c) })

	get(e, "/", "203.0.113.7:1")
	w := get(e, "/", "203.0.113.7:1")
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	require.JSONEq(t, `{"error":"slow down"}`, w.Body.String())
	require.Equal(t, echo.MIMEApplicationJSON, w.Header().Get(echo.HeaderContentType))
	require.Equal(t, "60", w.Header().Get("Retry-After"))
	require.EqualValues(t, 1, ran.Load())
}

func TestHeaderConfig(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, ipPolicy(t, "per-ip", core.PerMinute(10)))
	e := newEcho()
	e.Use(echolimit.New(l, echolimit.WithHeaders(ratelimitfields.Config{Omit: ratelimitfields.Draft, Reset: ratelimitfields.ResetDelta})))
	e.GET("/", hello)
	w := get(e, "/", "203.0.113.7:1")
	require.Empty(t, w.Header().Values("RateLimit"))
	require.Empty(t, w.Header().Values("RateLimit-Policy"))
	require.Equal(t, "6", w.Header().Get("X-RateLimit-Reset"))
}

func TestConcurrent(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, ipPolicy(t, "per-ip", core.PerMinute(50)))
	e := newEcho()
	e.Use(echolimit.New(l))
	e.GET("/", hello)
	var ok, denied atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				switch get(e, "/", "203.0.113.7:1").Code {
				case http.StatusOK:
					ok.Add(1)
				case http.StatusTooManyRequests:
					denied.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	require.EqualValues(t, 50, ok.Load())
	require.EqualValues(t, 150, denied.Load())
}

func TestNilLimiter(t *testing.T) {
	require.PanicsWithValue(t, "echolimit.New: nil limiter", func() { echolimit.New(nil) })
}
