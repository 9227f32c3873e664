package fiberlimit_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/fiberlimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/keyfunc"
)

// TestPathVariants (issue 12 item 4): Fiber routes "/LOGIN" and "/login/"
// to "/login" by default; every spelling of a path that reaches a route's
// handler is counted by that route's policy, under Fiber's routing options.
func TestPathVariants(t *testing.T) {
	t.Parallel()
	variants := []string{"/login", "/LOGIN", "/Login", "/login/", "/login//", "/LOGIN/", "//login", "/./login", "/log%69n",
		"/%6Cogin", "/login?a=1", "/login%2F", "/files/a", "/FILES/a", "/Files/A", "/files/a/", "/files/a%2Fb", "/files//a"}
	configs := map[string]fiber.Config{
		"default":       {},
		"CaseSensitive": {CaseSensitive: true},
		"StrictRouting": {StrictRouting: true},
		"UnescapePath":  {UnescapePath: true},
		"all":           {CaseSensitive: true, StrictRouting: true, UnescapePath: true},
	}
	for name, cfg := range configs {
		for _, v := range variants {
			t.Run(name+v, func(t *testing.T) {
				store, _ := newStore(t)
				l := newLimiter(t, store,
					core.Policy{Name: "login", Key: keyfunc.Const("all"), Limit: core.PerHour(1), Match: core.Match{Routes: []string{"/login"}}},
					core.Policy{Name: "files", Key: keyfunc.Const("all"), Limit: core.PerHour(1), Match: core.Match{Routes: []string{"/files/*"}}},
				)
				app := fiber.New(cfg)
				app.Use(fiberlimit.New(l))
				var ran string
				app.Get("/login", func(c *fiber.Ctx) error { ran = "login"; return nil })
				app.Get("/files/:name", func(c *fiber.Ctx) error { ran = "files"; return nil })
				res := get(t, app, v)
				if ran == "" {
					require.NotEqual(t, http.StatusOK, res.status)
					return
				}
				rl := res.header.Get("RateLimit")
				require.NotEmpty(t, rl, "%s reached the %s handler uncounted", v, ran)
				require.True(t, strings.HasPrefix(rl, `"`+ran+`"`), "%s reached the %s handler: %s", v, ran, rl)
			})
		}
	}
}

// TestPanickingCallbacks (issue 12 item 7): fasthttp does not recover
// handlers, so a panicking key function, skip or cost callback used to
// take the process down; now it is an undecided request.
func TestPanickingCallbacks(t *testing.T) {
	t.Parallel()
	boom := func(keyfunc.Request) (string, error) { panic("boom") }
	cases := map[string][]fiberlimit.Option{
		"key":  {fiberlimit.WithKey(boom)},
		"skip": {fiberlimit.WithSkip(func(*fiber.Ctx) bool { panic("boom") })},
		"cost": {fiberlimit.WithCost(func(*fiber.Ctx) int64 { panic("boom") })},
	}
	for name, opts := range cases {
		t.Run(name, func(t *testing.T) {
			store, _ := newStore(t)
			l := newLimiter(t, store, core.Policy{Name: "p", Key: ipKey(t), Limit: core.PerMinute(1)})
			var mu sync.Mutex
			var got error
			opts := append(opts, fiberlimit.WithErrorHandler(func(c *fiber.Ctx, err error) (bool, error) {
				mu.Lock()
				got = err
				mu.Unlock()
				return false, fiber.ErrServiceUnavailable
			}))
			app := fiber.New()
			app.Use(fiberlimit.New(l, opts...))
			app.Get("/", ok)
			for range 3 {
				res := get(t, app, "/")
				mu.Lock()
				err := got
				mu.Unlock()
				if name == "key" && err == nil {
					require.Equal(t, http.StatusOK, res.status) // the Limiter skipped the policy
					continue
				}
				require.Equal(t, http.StatusServiceUnavailable, res.status)
				require.ErrorContains(t, err, "panic")
			}
		})
	}
}

// TestUndecidedLogIsRateLimited (issue 12 item 3).
func TestUndecidedLogIsRateLimited(t *testing.T) {
	t.Parallel()
	store := &flakyStore{}
	store.down.Store(true)
	l := newLimiter(t, store, core.Policy{Name: "p", Key: ipKey(t), Limit: core.PerMinute(1)})
	var logs syncBuffer
	app := fiber.New()
	app.Use(fiberlimit.New(l, fiberlimit.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))))
	app.Get("/", ok)
	start := time.Now()
	for range 200 {
		require.Equal(t, http.StatusOK, get(t, app, "/").status)
	}
	lines := strings.Count(logs.String(), "request not rate limited")
	require.GreaterOrEqual(t, lines, 1)
	require.LessOrEqual(t, lines, int(time.Since(start)/time.Second)+1)
}

// TestErrorHandlerCanContinue (issue 12 item 3).
func TestErrorHandlerCanContinue(t *testing.T) {
	t.Parallel()
	store := &flakyStore{}
	store.down.Store(true)
	l := newLimiter(t, store, core.Policy{Name: "p", Key: ipKey(t), Limit: core.PerMinute(1)})
	for _, proceed := range []bool{true, false} {
		var ran atomic.Int32
		app := fiber.New()
		app.Use(fiberlimit.New(l, fiberlimit.WithErrorHandler(func(c *fiber.Ctx, err error) (bool, error) {
			return proceed, fiber.ErrServiceUnavailable
		})))
		app.Get("/", func(c *fiber.Ctx) error { ran.Add(1); return c.SendString("ok") })
		res := get(t, app, "/")
		if proceed {
			require.Equal(t, http.StatusOK, res.status)
			require.EqualValues(t, 1, ran.Load())
		} else {
			require.Equal(t, http.StatusServiceUnavailable, res.status)
			require.Zero(t, ran.Load())
		}
	}
}

// TestDisconnectedClient (issue 12 item 2): a request whose context is
// cancelled (an app that ties UserContext to the connection) is counted or
// refused, never run uncounted; real Redis, alone and behind a guard.
func TestDisconnectedClient(t *testing.T) {
	t.Parallel()
	rs := redistest.StartServer(t)
	for _, behind := range []string{"redis", "guard"} {
		t.Run(behind, func(t *testing.T) {
			rstore, err := redisstore.New(rs.Client(t), redisstore.WithPrefix(behind+":"))
			require.NoError(t, err)
			t.Cleanup(func() { _ = rstore.Close() })
			var store core.Store = rstore
			if behind == "guard" {
				g, err := guard.New(rstore, guard.WithFailOpen(), guard.WithLogger(slog.New(slog.DiscardHandler)))
				require.NoError(t, err)
				store = g
			}
			const capacity = 5
			l := newLimiter(t, store, core.Policy{Name: "p", Key: keyfunc.Const("one"), Limit: core.PerHour(capacity)})
			var ran atomic.Int32
			app := fiber.New()
			app.Use(func(c *fiber.Ctx) error {
				if c.Get("X-Gone") != "" {
					ctx, cancel := context.WithCancel(context.Background())
					cancel()
					c.SetUserContext(ctx)
				}
				return c.Next()
			})
			app.Use(fiberlimit.New(l, fiberlimit.WithLogger(slog.New(slog.DiscardHandler))))
			app.Get("/", func(c *fiber.Ctx) error { ran.Add(1); return nil })
			for range 40 {
				get(t, app, "/", "X-Gone", "1")
			}
			require.LessOrEqual(t, ran.Load(), int32(capacity))
			for range capacity + 2 {
				get(t, app, "/")
			}
			require.LessOrEqual(t, ran.Load(), int32(capacity), "handler runs never exceed what was counted")
			require.Positive(t, ran.Load())
		})
	}
}

// TestTierCacheKeepsItsOwnStrings (issue 12 item 8): the identities the
// Limiter's tier cache keeps beyond a request must not alias fasthttp's
// buffers, which the next request overwrites: each key is resolved once and
// keeps its own tier, however many requests follow.
func TestTierCacheKeepsItsOwnStrings(t *testing.T) {
	t.Parallel()
	store, _ := newStore(t)
	var mu sync.Mutex
	resolved := map[string]int{}
	tiering := core.Tiering{
		Key: keyfunc.Header("X-API-Key"),
		Resolve: func(_ context.Context, id string) (string, error) {
			mu.Lock()
			resolved[strings.Clone(id)]++
			mu.Unlock()
			if strings.HasPrefix(id, "pro-") {
				return "pro", nil
			}
			return "", nil
		},
	}
	l, err := core.NewLimiter(store, []core.Policy{{
		Name: "p", Key: keyfunc.Header("X-API-Key"), Limit: core.PerMinute(1000),
		Tiers: map[string]core.Limit{"pro": core.PerMinute(5000)},
	}}, core.WithTiering(tiering))
	require.NoError(t, err)
	app := fiber.New()
	app.Use(fiberlimit.New(l))
	app.Get("/", ok)
	const n = 300
	for pass := range 2 {
		for i := range n {
			key := fmt.Sprintf("free-%04d", i)
			if i%50 == 0 {
				key = fmt.Sprintf("pro-%04d", i)
			}
			want := "1000"
			if i%50 == 0 {
				want = "5000"
			}
			res := get(t, app, "/", "X-API-Key", key)
			require.Equal(t, want, res.header.Get("X-RateLimit-Limit"), "pass %d key %s", pass, key)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, resolved, n)
	for id, calls := range resolved {
		require.Equal(t, 1, calls, "%s was resolved again: its cache entry changed under it", id)
	}
}
