package ginlimit_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/ginlimit"
	"github.com/sluicehq/sluice/adapters/httplimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/internal/sftest"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/ratelimitfields"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	os.Exit(m.Run())
}

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

func (rec *recorder) keep(c *gin.Context) {
	d, ok := ginlimit.DecisionFrom(c)
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

func hello(c *gin.Context) { c.String(http.StatusOK, "hello") }

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
	// Epoch seconds at which the key is fresh, measured from the moment the
	// middleware ran (between sent and now).
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
	require.Equal(t, ratelimitfields.ProblemContentType, w.Header().Get("Content-Type"))
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
	r := gin.New()
	r.Use(ginlimit.New(l, ginlimit.WithDeniedHandler(func(c *gin.Context) {
		rec.keep(c)
		ginlimit.DeniedHandler(c)
	})))
	r.GET("/hello", func(c *gin.Context) { rec.keep(c); ran.Add(1); hello(c) })

	for i := 1; i <= 11; i++ {
		sent := time.Now()
		w := get(r, "/hello", "203.0.113.7:4000")
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

	// Another client has its own bucket; the first one refills with time.
	require.Equal(t, http.StatusOK, get(r, "/hello", "198.51.100.1:4000").Code)
	f.advance(6 * time.Second)
	w := get(r, "/hello", "203.0.113.7:4000")
	require.Equal(t, http.StatusOK, w.Code)
	require.Equal(t, "warning", w.Header().Get("X-RateLimit-State"))
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
			r := gin.New()
			r.Use(ginlimit.New(tc.limiter, ginlimit.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))))
			r.GET("/", hello)
			w := get(r, "/", tc.remote)
			require.Equal(t, http.StatusOK, w.Code)
			require.Equal(t, "hello", w.Body.String())
			for _, name := range []string{"RateLimit", "RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-State"} {
				require.Empty(t, w.Header().Values(name))
			}
			require.Contains(t, logs.String(), "sluice: request not rate limited")
		})
		t.Run(tc.name+"/error handler", func(t *testing.T) {
			var got error
			r := gin.New()
			r.Use(ginlimit.New(tc.limiter, ginlimit.WithErrorHandler(func(c *gin.Context, err error) bool {
				got = err
				c.String(http.StatusServiceUnavailable, "try later") // no Abort: the middleware aborts
				return false
			})))
			r.GET("/", func(c *gin.Context) { t.Error("handler ran after the error handler") })
			w := get(r, "/", tc.remote)
			require.Equal(t, http.StatusServiceUnavailable, w.Code)
			require.Equal(t, "try later", w.Body.String())
			require.ErrorIs(t, got, tc.is)
		})
	}
}

// Per-route limits: a strict limiter on /login keyed by IP, another on the
// /api group keyed by API key, and the global one on everything.
func TestPerRouteLimits(t *testing.T) {
	f := newFixture(t)
	global := f.limiter(t, ipPolicy(t, "per-ip", core.PerMinute(100)))
	login := f.limiter(t, ipPolicy(t, "login", core.PerMinute(2)))
	api := f.limiter(t, ipPolicy(t, "api", core.PerMinute(3)))

	r := gin.New()
	r.Use(ginlimit.New(global))
	r.GET("/login", ginlimit.New(login), hello)
	quiet := slog.New(slog.DiscardHandler)
	g := r.Group("/api", ginlimit.New(api, ginlimit.WithKey(keyfunc.Header("X-API-Key")), ginlimit.WithLogger(quiet)))
	g.GET("/items", hello)
	r.GET("/hello", hello)

	for i := 1; i <= 2; i++ {
		require.Equal(t, http.StatusOK, get(r, "/login", "203.0.113.7:1").Code)
	}
	w := get(r, "/login", "203.0.113.7:1")
	checkProblem(t, w, "login")
	// Stacked, the route's limiter merges with the global one: both
	// policies are listed, the denying one binds.
	require.Equal(t, `"per-ip";q=100;w=60, "login";q=2;w=60`, w.Header().Get("RateLimit-Policy"))
	require.Equal(t, http.StatusOK, get(r, "/hello", "203.0.113.7:1").Code, "other routes are unaffected")
	require.Equal(t, http.StatusOK, get(r, "/login", "198.51.100.1:1").Code, "other clients are unaffected")

	// The API key is the identity: two addresses with one key share a
	// bucket; another key has its own.
	key := func(k, remote string) *httptest.ResponseRecorder {
		return do(r, req{target: "/api/items", remote: remote, header: http.Header{"X-Api-Key": {k}}})
	}
	require.Equal(t, "2", key("k1", "203.0.113.7:1").Header().Get("X-RateLimit-Remaining"))
	require.Equal(t, "1", key("k1", "198.51.100.1:1").Header().Get("X-RateLimit-Remaining"))
	require.Equal(t, "0", key("k1", "192.0.2.1:1").Header().Get("X-RateLimit-Remaining"))
	checkProblem(t, key("k1", "192.0.2.2:1"), "api")
	require.Equal(t, "2", key("k2", "203.0.113.7:1").Header().Get("X-RateLimit-Remaining"))

	// No API key: no identity, so the route limiter fails open.
	require.Equal(t, http.StatusOK, get(r, "/api/items", "203.0.113.7:1").Code)
}

// Route is the template, so /users/1 and /users/2 share a route bucket; a
// path no route matched falls back to the path.
func TestRouteIsTheTemplate(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, core.Policy{Name: "per-route", Key: keyfunc.Route(), Limit: core.PerMinute(2)})
	r := gin.New()
	r.Use(ginlimit.New(l))
	r.GET("/users/:id", hello)

	require.Equal(t, "1", get(r, "/users/1", "203.0.113.7:1").Header().Get("X-RateLimit-Remaining"))
	require.Equal(t, "0", get(r, "/users/2", "198.51.100.1:1").Header().Get("X-RateLimit-Remaining"))
	require.Equal(t, http.StatusTooManyRequests, get(r, "/users/3", "192.0.2.1:1").Code)

	w := get(r, "/nowhere", "203.0.113.7:1")
	require.Equal(t, http.StatusNotFound, w.Code)
	require.Equal(t, "1", w.Header().Get("X-RateLimit-Remaining"))
}

func TestDecisionInHandler(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, ipPolicy(t, "per-ip", core.PerMinute(10)))
	r := gin.New()
	r.Use(ginlimit.New(l))
	r.GET("/", func(c *gin.Context) {
		d, ok := ginlimit.DecisionFrom(c)
		require.True(t, ok)
		v, ok := c.Get(ginlimit.DecisionKey)
		require.True(t, ok)
		require.Same(t, d, v)
		hd, ok := httplimit.DecisionFrom(c.Request.Context())
		require.True(t, ok, "the Decision is in the request context")
		require.Same(t, d, hd)
		c.String(http.StatusOK, "%s %d", d.State(), d.Bound().Remaining)
	})
	var w *httptest.ResponseRecorder
	for range 9 {
		w = get(r, "/", "203.0.113.7:1")
	}
	require.Equal(t, "warning 1", w.Body.String())

	c, _ := gin.CreateTestContext(httptest.NewRecorder())
	_, ok := ginlimit.DecisionFrom(c)
	require.False(t, ok)
}

func TestDeniedHandler(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, ipPolicy(t, "per-ip", core.PerMinute(1)))
	r := gin.New()
	r.Use(ginlimit.New(l, ginlimit.WithDeniedHandler(func(c *gin.Context) {
		d, _ := ginlimit.DecisionFrom(c)
		require.False(t, d.Allowed)
		require.NotEmpty(t, c.Writer.Header().Get("Retry-After"), "headers are set before the denied handler")
		c.JSON(http.StatusTooManyRequests, gin.H{"error": "slow down"}) // no Abort: the middleware aborts
	})))
	var ran atomic.Int32
	r.GET("/", func(c *gin.Context) { ran.Add(1); hello(c) })

	get(r, "/", "203.0.113.7:1")
	w := get(r, "/", "203.0.113.7:1")
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	require.JSONEq(t, `{"error":"slow down"}`, w.Body.String())
	require.Equal(t, "60", w.Header().Get("Retry-After"))
	require.EqualValues(t, 1, ran.Load())

	// Outside the middleware the default answer still is a problem.
	rw := httptest.NewRecorder()
	c, _ := gin.CreateTestContext(rw)
	ginlimit.DeniedHandler(c)
	require.True(t, c.IsAborted())
	checkProblem(t, rw)
}

func TestHeaderConfig(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, ipPolicy(t, "per-ip", core.PerMinute(10)))
	r := gin.New()
	r.Use(ginlimit.New(l, ginlimit.WithHeaders(ratelimitfields.Config{Omit: ratelimitfields.Draft, Reset: ratelimitfields.ResetDelta})))
	r.GET("/", hello)
	w := get(r, "/", "203.0.113.7:1")
	require.Empty(t, w.Header().Values("RateLimit"))
	require.Empty(t, w.Header().Values("RateLimit-Policy"))
	require.Equal(t, "6", w.Header().Get("X-RateLimit-Reset"))
}

// Many goroutines, one client: exactly the capacity is admitted.
func TestConcurrent(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, ipPolicy(t, "per-ip", core.PerMinute(50)))
	r := gin.New()
	r.Use(ginlimit.New(l))
	r.GET("/", hello)
	var ok, denied atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				switch get(r, "/", "203.0.113.7:1").Code {
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
	require.PanicsWithValue(t, "ginlimit.New: nil limiter", func() { ginlimit.New(nil) })
}
