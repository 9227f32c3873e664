package fiberlimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/adapters/fiberlimit"
	"github.com/sluicehq/sluice/adapters/internal/adaptertest"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/internal/sftest"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/ratelimitfields"
)

// ---- fixtures ----

func newStore(t testing.TB) (*memorystore.Store, *limitertest.Clock) {
	clock := limitertest.NewClock()
	s, err := memorystore.New(memorystore.WithClock(clock.Now))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s, clock
}

func newLimiter(t testing.TB, s core.Store, ps ...core.Policy) *core.Limiter {
	l, err := core.NewLimiter(s, ps)
	require.NoError(t, err)
	return l
}

func ipKey(t testing.TB) keyfunc.Func {
	f := keyfunc.IP()
	return f
}

func ok(c *fiber.Ctx) error { return c.SendString("ok") }

// spy records the Decision of every request, including denied ones, from
// outside the limiter.
func spy(got **core.Decision) fiber.Handler {
	return func(c *fiber.Ctx) error {
		err := c.Next()
		*got, _ = fiberlimit.DecisionFrom(c)
		return err
	}
}

type response struct {
	status int
	header http.Header
	body   string
}

// get sends GET target with header name/value pairs through Fiber's harness.
func get(t testing.TB, app *fiber.App, target string, hdr ...string) response {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, target, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	res, err := app.Test(req, -1)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return response{res.StatusCode, res.Header, string(b)}
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer = adaptertest.SyncBuffer

// flakyStore is a memory store whose backend can be taken down.
type flakyStore struct {
	core.Store
	down atomic.Bool
}

var errBackend = errors.New("backend unreachable")

func (s *flakyStore) Take(ctx context.Context, ops []core.Op, out []core.Result) error {
	if s.down.Load() {
		return fmt.Errorf("flaky: %w", errBackend)
	}
	return s.Store.Take(ctx, ops, out)
}

func (s *flakyStore) Reset(ctx context.Context, k core.Key, l core.Limit) error {
	if s.down.Load() {
		return fmt.Errorf("flaky: %w", errBackend)
	}
	return s.Store.Reset(ctx, k, l)
}

// recordingStore keeps every key it is given, copied as the core.Store
// contract requires (a request's strings may alias buffers fasthttp reuses).
type recordingStore struct {
	core.Store
	mu   sync.Mutex
	keys []core.Key
}

func (s *recordingStore) Take(ctx context.Context, ops []core.Op, out []core.Result) error {
	s.mu.Lock()
	for _, op := range ops {
		s.keys = append(s.keys, core.Key{Identity: strings.Clone(op.Key.Identity), Policy: strings.Clone(op.Key.Policy)})
	}
	s.mu.Unlock()
	return s.Store.Take(ctx, ops, out)
}

// ---- header parsing: RFC 9651 structured fields, read by internal/sftest ----

func atoi(t testing.TB, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	require.NoError(t, err, s)
	return n
}

func ceilSeconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

func ceilUnix(t time.Time) int64 {
	if t.Nanosecond() > 0 {
		return t.Unix() + 1
	}
	return t.Unix()
}

// requireHeaders checks every rate-limit header of res against d, the
// Decision the middleware made; the response was produced between before
// and after (X-RateLimit-Reset is in real epoch seconds).
func requireHeaders(t testing.TB, res response, d *core.Decision, before, after time.Time) {
	t.Helper()
	require.NotNil(t, d)
	b := d.Bound()

	ps := sftest.List(t, res.header.Get("RateLimit-Policy"))
	require.Len(t, ps, len(d.Results))
	for i, p := range d.Results {
		w := p.Limit.Period
		if p.Limit.Algorithm.Bucket() {
			w = time.Duration(float64(p.Limit.Period) * float64(p.Limit.Capacity()) / float64(p.Limit.Rate))
		}
		require.Equal(t, sftest.Member{Name: p.Policy, Params: map[string]int64{"q": p.Limit.Capacity(), "w": max(ceilSeconds(w), 1)}}, ps[i])
	}

	rl := sftest.List(t, res.header.Get("RateLimit"))
	require.Len(t, rl, 1, "RateLimit names the binding policy only")
	for k := range rl[0].Params {
		require.Contains(t, []string{"r", "t"}, k, "RateLimit parameters")
	}
	name := rl[0].Name
	r, hasR := rl[0].Params["r"]
	require.True(t, hasR, "RateLimit has r")
	tt, hasT := rl[0].Params["t"]
	if !hasT {
		tt = -1 // no t: no wait brings more quota
	}
	require.Equal(t, b.Policy, name)
	require.Equal(t, b.Remaining, r)
	switch {
	case b.Never():
		require.Equal(t, int64(-1), tt, "no t when no wait lets the request through")
		require.Empty(t, res.header.Values("Retry-After"))
	case !b.Allowed:
		// t is the wait, but never more than the window; Retry-After is
		// the exact wait (the draft: never earlier than t).
		require.Equal(t, min(ceilSeconds(b.RetryAfter), ps[d.Binding].Params["w"]), tt)
		require.Positive(t, tt, "t is never 0 while limited")
		require.Equal(t, strconv.FormatInt(ceilSeconds(b.RetryAfter), 10), res.header.Get("Retry-After"))
	default:
		// t is until more quota is available: never later than the key is
		// whole again, nor than the window (exact values per algorithm:
		// httplimit's TestTUntilMoreQuota).
		require.Positive(t, tt)
		require.LessOrEqual(t, tt, ceilSeconds(b.ResetAfter))
		require.Empty(t, res.header.Values("Retry-After"))
	}

	require.Equal(t, strconv.FormatInt(b.Limit.Capacity(), 10), res.header.Get("X-RateLimit-Limit"))
	require.Equal(t, strconv.FormatInt(b.Remaining, 10), res.header.Get("X-RateLimit-Remaining"))
	reset := atoi(t, res.header.Get("X-RateLimit-Reset"))
	require.GreaterOrEqual(t, reset, ceilUnix(before.Add(b.ResetAfter)))
	require.LessOrEqual(t, reset, ceilUnix(after.Add(b.ResetAfter)))
	require.Equal(t, d.State().String(), res.header.Get("X-RateLimit-State"))
	for _, h := range []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit",
		"X-RateLimit-Remaining", "X-RateLimit-Reset", "X-RateLimit-State"} {
		require.Len(t, res.header.Values(h), 1, h)
	}
}

type problem struct {
	Type     string   `json:"type"`
	Title    string   `json:"title"`
	Status   int      `json:"status"`
	Detail   string   `json:"detail"`
	Violated []string `json:"violated-policies"`
}

func requireProblem(t testing.TB, res response, violated ...string) problem {
	t.Helper()
	require.Equal(t, http.StatusTooManyRequests, res.status)
	require.Equal(t, ratelimitfields.ProblemContentType, res.header.Get("Content-Type"))
	require.Equal(t, "no-store", res.header.Get("Cache-Control"))
	var p problem
	require.NoError(t, json.Unmarshal([]byte(res.body), &p), res.body)
	require.Equal(t, "https://iana.org/assignments/http-problem-types#quota-exceeded", p.Type)
	require.Equal(t, "Too Many Requests", p.Title)
	require.Equal(t, 429, p.Status)
	require.Equal(t, violated, p.Violated)
	return p
}

// ---- tests ----

func TestStoreFailure(t *testing.T) {
	t.Parallel()
	t.Run("fail open by default", func(t *testing.T) {
		t.Parallel()
		mem, _ := newStore(t)
		store := &flakyStore{Store: mem}
		l := newLimiter(t, store, core.Policy{Name: "per-ip", Key: ipKey(t), Limit: core.PerMinute(1)})
		var logs syncBuffer
		app := fiber.New()
		app.Use(fiberlimit.New(l, fiberlimit.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))))
		app.Get("/", func(c *fiber.Ctx) error {
			_, ok := fiberlimit.DecisionFrom(c)
			return c.SendString(strconv.FormatBool(ok))
		})

		store.down.Store(true)
		for range 3 {
			res := get(t, app, "/")
			require.Equal(t, http.StatusOK, res.status)
			require.Equal(t, "false", res.body, "no Decision when undecided")
			require.Empty(t, res.header.Get("RateLimit"))
			require.Empty(t, res.header.Get("RateLimit-Policy"))
		}
		require.Equal(t, 1, strings.Count(logs.String(), "sluice: request not rate limited"), "at most a line a second")
		require.Contains(t, logs.String(), "backend unreachable")

		store.down.Store(false) // recovery needs nothing
		require.Equal(t, http.StatusOK, get(t, app, "/").status)
		require.Equal(t, http.StatusTooManyRequests, get(t, app, "/").status)
	})
	t.Run("error handler", func(t *testing.T) {
		t.Parallel()
		mem, _ := newStore(t)
		store := &flakyStore{Store: mem}
		store.down.Store(true)
		l := newLimiter(t, store, core.Policy{Name: "per-ip", Key: ipKey(t), Limit: core.PerMinute(1)})
		var got error
		app := fiber.New()
		app.Use(fiberlimit.New(l, fiberlimit.WithErrorHandler(func(c *fiber.Ctx, err error) (bool, error) {
			got = err
			return false, c.Status(fiber.StatusServiceUnavailable).SendString("try later")
		})))
		handled := false
		app.Get("/", func(c *fiber.Ctx) error { handled = true; return nil })

		res := get(t, app, "/")
		require.Equal(t, http.StatusServiceUnavailable, res.status)
		require.Equal(t, "try later", res.body)
		require.ErrorIs(t, got, errBackend)
		require.False(t, handled)
		require.Empty(t, res.header.Get("RateLimit"))
	})
	t.Run("error handler returns an error", func(t *testing.T) {
		t.Parallel()
		store := &flakyStore{Store: nil}
		store.down.Store(true)
		l := newLimiter(t, store, core.Policy{Name: "per-ip", Key: ipKey(t), Limit: core.PerMinute(1)})
		app := fiber.New()
		app.Use(fiberlimit.New(l, fiberlimit.WithErrorHandler(func(c *fiber.Ctx, err error) (bool, error) {
			return false, fiber.ErrServiceUnavailable // to Fiber's ErrorHandler
		})))
		app.Get("/", ok)
		res := get(t, app, "/")
		require.Equal(t, http.StatusServiceUnavailable, res.status)
		require.NotContains(t, res.body, "backend", "no error text reaches the client")
	})
}

// Two routes, two limiters: one per client IP, one per API key and route
// template, each counting on its own.
func TestPerRouteLimits(t *testing.T) {
	t.Parallel()
	store, _ := newStore(t)
	search := newLimiter(t, store, core.Policy{Name: "search", Key: ipKey(t), Limit: core.PerMinute(2)})
	api := newLimiter(t, store, core.Policy{Name: "api", Key: ipKey(t), Limit: core.PerMinute(3)})
	app := fiber.New()
	app.Get("/search", fiberlimit.New(search), ok)
	app.Get("/api/items/:id", fiberlimit.New(api, fiberlimit.WithKey(keyfunc.Join(keyfunc.Header("X-API-Key"), keyfunc.Route()))), ok)

	statuses := func(target string, n int, hdr ...string) []int {
		var s []int
		for range n {
			res := get(t, app, target, hdr...)
			s = append(s, res.status)
		}
		return s
	}
	require.Equal(t, []int{200, 200, 429}, statuses("/search", 3))
	// Different paths, one template: one bucket for k1.
	require.Equal(t, []int{200, 200}, statuses("/api/items/1", 2, "X-API-Key", "k1"))
	require.Equal(t, []int{200, 429}, statuses("/api/items/2", 2, "X-API-Key", "k1"))
	require.Equal(t, []int{200, 200, 200, 429}, statuses("/api/items/3", 4, "X-API-Key", "k2"))

	res := get(t, app, "/api/items/9", "X-API-Key", "k3")
	require.Equal(t, `"api";q=3;w=60`, res.header.Get("RateLimit-Policy"))
	res = get(t, app, "/search")
	require.Equal(t, `"search";q=2;w=60`, res.header.Get("RateLimit-Policy"))
}

// WithKey replaces the policy's identity: two API keys from one address
// have separate buckets.
func TestKeyOverride(t *testing.T) {
	t.Parallel()
	store, _ := newStore(t)
	l := newLimiter(t, store, core.Policy{Name: "per-client", Key: ipKey(t), Limit: core.PerMinute(1)})
	app := fiber.New()
	app.Get("/by-ip", fiberlimit.New(l), ok)
	app.Get("/by-key", fiberlimit.New(l, fiberlimit.WithKey(keyfunc.Header("X-API-Key"))), ok)

	require.Equal(t, 200, get(t, app, "/by-ip", "X-API-Key", "a").status)
	require.Equal(t, 429, get(t, app, "/by-ip", "X-API-Key", "b").status, "same address, same bucket")
	require.Equal(t, 200, get(t, app, "/by-key", "X-API-Key", "a").status)
	require.Equal(t, 200, get(t, app, "/by-key", "X-API-Key", "b").status)
	require.Equal(t, 429, get(t, app, "/by-key", "X-API-Key", "a").status)
}

func TestDecisionInHandler(t *testing.T) {
	t.Parallel()
	store, _ := newStore(t)
	l := newLimiter(t, store, core.Policy{Name: "per-ip", Key: ipKey(t), Limit: core.PerMinute(10)})
	app := fiber.New()
	app.Use(fiberlimit.New(l))
	app.Get("/", func(c *fiber.Ctx) error {
		d, ok := fiberlimit.DecisionFrom(c)
		if !ok || c.Locals(fiberlimit.DecisionKey) != d {
			return c.SendStatus(fiber.StatusInternalServerError)
		}
		return c.SendString(fmt.Sprintf("%s %s %d", d.Bound().Policy, d.State(), d.Bound().Remaining))
	})
	var bodies []string
	for range 9 {
		bodies = append(bodies, get(t, app, "/").body)
	}
	require.Equal(t, "per-ip normal 9", bodies[0])
	require.Equal(t, "per-ip normal 2", bodies[7])
	require.Equal(t, "per-ip warning 1", bodies[8])
}

func TestDeniedHandler(t *testing.T) {
	t.Parallel()
	store, _ := newStore(t)
	l := newLimiter(t, store, core.Policy{Name: "per-ip", Key: ipKey(t), Limit: core.PerMinute(1)})
	app := fiber.New()
	app.Use(fiberlimit.New(l, fiberlimit.WithDeniedHandler(func(c *fiber.Ctx) error {
		d, _ := fiberlimit.DecisionFrom(c)
		return c.Status(fiber.StatusTooManyRequests).JSON(fiber.Map{"retry": c.GetRespHeader("Retry-After"), "state": d.State().String()})
	})))
	app.Get("/", ok)

	get(t, app, "/")
	res := get(t, app, "/")
	require.Equal(t, http.StatusTooManyRequests, res.status)
	require.JSONEq(t, `{"retry":"60","state":"throttled"}`, res.body)
	require.Equal(t, "60", res.header.Get("Retry-After"))
	require.Equal(t, `"per-ip";r=0;t=60`, res.header.Get("RateLimit"))
}

func TestWithHeaders(t *testing.T) {
	t.Parallel()
	store, _ := newStore(t)
	l := newLimiter(t, store, core.Policy{Name: "per-ip", Key: ipKey(t), Limit: core.PerMinute(2)})
	app := fiber.New()
	app.Use(fiberlimit.New(l, fiberlimit.WithHeaders(ratelimitfields.Config{Omit: ratelimitfields.Draft | ratelimitfields.State, Reset: ratelimitfields.ResetDelta})))
	app.Get("/", ok)

	res := get(t, app, "/")
	require.Empty(t, res.header.Get("RateLimit"))
	require.Empty(t, res.header.Get("RateLimit-Policy"))
	require.Empty(t, res.header.Get("X-RateLimit-State"))
	require.Equal(t, "2", res.header.Get("X-RateLimit-Limit"))
	require.Equal(t, "1", res.header.Get("X-RateLimit-Remaining"))
	require.Equal(t, "30", res.header.Get("X-RateLimit-Reset"))
}

// The keyfunc.Request view: every method, against what was sent.
func TestRequestView(t *testing.T) {
	t.Parallel()
	for _, normalize := range []bool{true, false} {
		t.Run(fmt.Sprintf("normalizing=%v", normalize), func(t *testing.T) {
			t.Parallel()
			type seen struct {
				method, route, path, header, lower, missing, query, remote, ctxValue string
				xff, none                                                            []string
			}
			var got seen
			view := func(r keyfunc.Request) (string, error) {
				// Cloned: the view's strings are valid only during this call.
				got = seen{
					method: strings.Clone(r.Method()), route: r.Route(), path: strings.Clone(r.Path()),
					header: strings.Clone(r.Header("X-API-Key")), lower: strings.Clone(r.Header("x-api-key")),
					missing: r.Header("X-Missing"), query: strings.Clone(r.Query("q")), remote: r.RemoteAddr(),
					none: r.HeaderValues("X-Missing"),
				}
				for _, v := range r.HeaderValues("x-forwarded-for") {
					got.xff = append(got.xff, strings.Clone(v))
				}
				got.ctxValue, _ = r.Context().Value(ctxKey{}).(string)
				return "k", nil
			}
			mem, _ := newStore(t)
			store := &ctxStore{Store: mem}
			l := newLimiter(t, store, core.Policy{Name: "p", Key: keyfunc.Const("unused"), Limit: core.PerMinute(10)})
			app := fiber.New(fiber.Config{DisableHeaderNormalizing: !normalize})
			app.Use(func(c *fiber.Ctx) error {
				c.SetUserContext(context.WithValue(c.UserContext(), ctxKey{}, "user-7"))
				return c.Next()
			})
			app.Get("/users/:id", fiberlimit.New(l, fiberlimit.WithKey(view)), ok)

			req := httptest.NewRequest(http.MethodGet, "/users/42?q=x&q=y", nil)
			req.Header["x-api-key"] = []string{"secret"} // sent in lower case
			req.Header["X-Forwarded-For"] = []string{"198.51.100.1, 203.0.113.9"}
			req.Header["x-FORWARDED-for"] = []string{"10.0.0.3"}
			res, err := app.Test(req, -1)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, res.StatusCode)
			require.NoError(t, res.Body.Close())

			require.Equal(t, seen{
				method: "GET", route: "/users/:id", path: "/users/42", header: "secret", lower: "secret",
				query: "x", remote: "0.0.0.0:0", ctxValue: "user-7",
			}, seen{got.method, got.route, got.path, got.header, got.lower, got.missing, got.query, got.remote, got.ctxValue, nil, nil})
			require.Nil(t, got.none)
			require.Equal(t, []string{"user-7"}, store.values, "the store gets c.UserContext()")
			// Both lines, in order (Go's DumpRequest writes the map in
			// sorted key order: upper case first).
			require.Equal(t, []string{"198.51.100.1, 203.0.113.9", "10.0.0.3"}, got.xff)
		})
	}
}

type ctxKey struct{}

// ctxStore records the ctxKey value of every context it is given, and
// refuses the pooled *fasthttp.RequestCtx, which a Redis call still running
// after a timeout could otherwise use after it is recycled.
type ctxStore struct {
	core.Store
	values []string
}

func (s *ctxStore) Take(ctx context.Context, ops []core.Op, out []core.Result) error {
	if _, ok := ctx.(*fasthttp.RequestCtx); ok {
		return errors.New("ctxStore: got the pooled *fasthttp.RequestCtx")
	}
	v, _ := ctx.Value(ctxKey{}).(string)
	s.values = append(s.values, v)
	return s.Store.Take(ctx, ops, out)
}

// keyfunc.IP walks every X-Forwarded-For line through the view.
func TestTrustedProxyIP(t *testing.T) {
	t.Parallel()
	ip := keyfunc.IP(keyfunc.TrustProxies("0.0.0.0/32", "10.0.0.0/8"))
	store, _ := newStore(t)
	l := newLimiter(t, store, core.Policy{Name: "per-ip", Key: ip, Limit: core.PerMinute(1)})
	app := fiber.New()
	app.Use(fiberlimit.New(l))
	app.Get("/", ok)

	// The client-written leftmost entry never matters: the client is the
	// rightmost untrusted address, 203.0.113.9, across both lines.
	require.Equal(t, 200, get(t, app, "/", "X-Forwarded-For", "1.1.1.1, 203.0.113.9", "X-Forwarded-For", "10.0.0.3").status)
	require.Equal(t, 429, get(t, app, "/", "X-Forwarded-For", "2.2.2.2, 203.0.113.9", "X-Forwarded-For", "10.0.0.3").status)
	require.Equal(t, 200, get(t, app, "/", "X-Forwarded-For", "203.0.113.10", "X-Forwarded-For", "10.0.0.3").status)
}

// fiberlimit.FrameworkIP is c.IP(): the transport peer by default, and whatever the
// client writes once ProxyHeader is set without a trusted-proxy check.
func TestFrameworkIP(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		config fiber.Config
		second int
	}{
		{"default config: transport peer", fiber.Config{}, 429},
		{"ProxyHeader without trust check: spoofable", fiber.Config{ProxyHeader: fiber.HeaderXForwardedFor}, 200},
		{"ProxyHeader with trust check, peer untrusted", fiber.Config{ProxyHeader: fiber.HeaderXForwardedFor, EnableTrustedProxyCheck: true}, 429},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store, _ := newStore(t)
			l := newLimiter(t, store, core.Policy{Name: "per-ip", Key: fiberlimit.FrameworkIP(), Limit: core.PerMinute(1)})
			app := fiber.New(tc.config)
			app.Use(fiberlimit.New(l))
			app.Get("/", ok)
			require.Equal(t, 200, get(t, app, "/", "X-Forwarded-For", "198.51.100.1").status)
			require.Equal(t, tc.second, get(t, app, "/", "X-Forwarded-For", "198.51.100.2").status)
		})
	}
	t.Run("header absent: transport peer", func(t *testing.T) {
		t.Parallel()
		store, _ := newStore(t)
		l := newLimiter(t, store, core.Policy{Name: "per-ip", Key: fiberlimit.FrameworkIP(), Limit: core.PerMinute(1)})
		app := fiber.New(fiber.Config{ProxyHeader: fiber.HeaderXForwardedFor})
		app.Use(fiberlimit.New(l))
		app.Get("/", ok)
		require.Equal(t, 200, get(t, app, "/").status)
		require.Equal(t, 429, get(t, app, "/").status, "omitting the header is no way around the limit")
	})
	t.Run("outside the middleware", func(t *testing.T) {
		t.Parallel()
		_, err := fiberlimit.FrameworkIP()(keyfunc.Static{Remote: "203.0.113.7:1"})
		require.Error(t, err)
	})
}

// fasthttp reuses request buffers after each request. What the middleware
// hands out beyond the request (the Decision) must not change when it does,
// and a store is given each request's own key.
func TestKeptValuesSurviveBufferReuse(t *testing.T) {
	t.Parallel()
	mem, _ := newStore(t)
	store := &recordingStore{Store: mem}
	l := newLimiter(t, store, core.Policy{Name: "per-key", Key: keyfunc.Header("X-API-Key"), Limit: core.PerMinute(1000)})
	const n = 300
	var kept []*core.Decision
	var raw []string // view strings kept without a copy: the control
	app := fiber.New()
	app.Get("/", fiberlimit.New(l), func(c *fiber.Ctx) error {
		d, _ := fiberlimit.DecisionFrom(c)
		kept = append(kept, d)
		raw = append(raw, fiberlimit.Request(c).Header("X-API-Key"))
		return c.SendString("ok")
	})

	// One RequestCtx for every request, as a fasthttp server worker reuses
	// it, so the header buffers are overwritten in place.
	h := app.Handler()
	var fctx fasthttp.RequestCtx
	fctx.Init(&fasthttp.Request{}, &net.TCPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 5555}, nil)
	key := func(i int) string { return fmt.Sprintf("key-%04d", i) }
	for i := range n {
		fctx.Request.Reset()
		fctx.Response.Reset()
		fctx.ResetUserValues()
		fctx.Request.SetRequestURI("/")
		fctx.Request.Header.Set("X-API-Key", key(i))
		h(&fctx)
		require.Equal(t, fiber.StatusOK, fctx.Response.StatusCode())
	}

	require.Len(t, kept, n)
	require.Len(t, store.keys, n)
	for i := range n {
		d := kept[i]
		require.True(t, d.Allowed)
		require.Len(t, d.Results, 1)
		require.Equal(t, "per-key", d.Results[0].Policy)
		require.Equal(t, int64(999), d.Results[0].Remaining)
		require.Equal(t, core.Normal, d.State())
		require.Equal(t, core.Key{Identity: key(i), Policy: "per-key"}, store.keys[i], "store key %d", i)
	}
	// The control: an uncopied view string now reads a later request's key,
	// so the reuse this test relies on did happen.
	require.NotEqual(t, key(0), raw[0])
	require.Equal(t, key(n-1), raw[0])
}

// Concurrent requests for one key: exactly the capacity gets through.
func TestConcurrent(t *testing.T) {
	t.Parallel()
	store, _ := newStore(t)
	l := newLimiter(t, store, core.Policy{Name: "per-ip", Key: ipKey(t), Limit: core.PerMinute(20)})
	app := fiber.New()
	app.Use(fiberlimit.New(l))
	app.Get("/", ok)

	var allowed, denied atomic.Int64
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := app.Test(httptest.NewRequest(http.MethodGet, "/", nil), -1)
			if err != nil {
				t.Error(err)
				return
			}
			_ = res.Body.Close()
			switch res.StatusCode {
			case 200:
				allowed.Add(1)
			case 429:
				denied.Add(1)
			}
		}()
	}
	wg.Wait()
	require.Equal(t, int64(20), allowed.Load())
	require.Equal(t, int64(30), denied.Load())
}

func TestNewNilLimiterPanics(t *testing.T) {
	t.Parallel()
	require.PanicsWithValue(t, "fiberlimit.New: nil limiter", func() { fiberlimit.New(nil) })
}

// The view's RemoteAddr reads exactly as net.Addr.String does.
func TestRemoteAddr(t *testing.T) {
	t.Parallel()
	var got string
	app := fiber.New()
	app.Get("/", func(c *fiber.Ctx) error { got = fiberlimit.Request(c).RemoteAddr(); return nil })
	h := app.Handler()
	for _, a := range []net.Addr{
		&net.TCPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 5555},          // 16-byte form
		&net.TCPAddr{IP: net.IP{203, 0, 113, 7}, Port: 1},               // 4-byte form
		&net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 443},         // IPv6
		&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 80, Zone: "en0"}, // zone
		&net.TCPAddr{IP: net.IPv4zero},                                  // Fiber's test conn
		&net.TCPAddr{},                                                  // no IP
		&net.UnixAddr{Name: "/run/app.sock", Net: "unix"},
		&net.UnixAddr{Name: "@", Net: "unix"},
	} {
		var fctx fasthttp.RequestCtx
		var req fasthttp.Request
		req.SetRequestURI("/")
		fctx.Init(&req, a, nil)
		h(&fctx)
		require.Equal(t, a.String(), got)
	}
}
