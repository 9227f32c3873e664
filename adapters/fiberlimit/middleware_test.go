package fiberlimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/adapters/fiberlimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// Fiber's own idioms (fasthttp's request view and buffer reuse, c.IP()).
// The behaviour every adapter shares is in the conformance suite
// (conformance_test.go).

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

func ok(c *fiber.Ctx) error { return c.SendString("ok") }

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
// hands out that may be kept beyond the request (a copy of a PolicyResult:
// its strings) must not change when it does, and a store is given each
// request's own key. The Decision itself goes back to the middleware's
// pool when Fiber empties Locals (DecisionFrom), and comes back empty.
func TestKeptValuesSurviveBufferReuse(t *testing.T) {
	t.Parallel()
	mem, _ := newStore(t)
	store := &recordingStore{Store: mem}
	l := newLimiter(t, store, core.Policy{Name: "per-key", Key: keyfunc.Header("X-API-Key"), Limit: core.PerMinute(1000)})
	const n = 300
	var kept []core.PolicyResult
	var allowed []bool
	var last *core.Decision
	var raw []string // view strings kept without a copy: the control
	app := fiber.New()
	app.Get("/", fiberlimit.New(l), func(c *fiber.Ctx) error {
		d, _ := fiberlimit.DecisionFrom(c)
		require.Len(t, d.Results, 1)
		kept, allowed, last = append(kept, d.Results[0]), append(allowed, d.Allowed), d
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
		p := kept[i]
		require.True(t, allowed[i])
		require.Equal(t, "per-key", p.Policy)
		require.Equal(t, int64(999), p.Remaining)
		require.Equal(t, core.Normal, p.State)
		require.Equal(t, core.Key{Identity: key(i), Policy: "per-key"}, store.keys[i], "store key %d", i)
	}
	// The last request's Decision was given back when its Locals were
	// emptied, with nothing of it left.
	fctx.ResetUserValues()
	require.False(t, last.Allowed)
	require.Empty(t, last.Results)
	// The control: an uncopied view string now reads a later request's key,
	// so the reuse this test relies on did happen.
	require.NotEqual(t, key(0), raw[0])
	require.Equal(t, key(n-1), raw[0])
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
