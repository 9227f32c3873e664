package fiberlimit_test

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/adapters/fiberlimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// The middleware reuses its Decisions from one request to the next
// (DecisionFrom). Concurrent clients of a real server, through a global
// middleware and a route's stacked on it, each see their own Decision in
// the handler and in the app's ErrorHandler (which runs after the
// middlewares return), never another request's, and each middleware
// counts its own: the j-th request of a client has 999-j remaining under
// both policies. Run with -race.
func TestPooledDecisionsUnderConcurrency(t *testing.T) {
	t.Parallel()
	mem, _ := newStore(t)
	key := keyfunc.Header("X-API-Key")
	global := newLimiter(t, mem, core.Policy{Name: "global", Key: key, Limit: core.PerMinute(1000)})
	route := newLimiter(t, mem, core.Policy{Name: "route", Key: key, Limit: core.PerMinute(1000)})
	seen := func(c *fiber.Ctx) string {
		d, ok := fiberlimit.DecisionFrom(c)
		if !ok || len(d.Results) != 2 {
			return fmt.Sprintf("ok %v, %d results", ok, len(d.Results))
		}
		return fmt.Sprintf("%s=%d %s=%d allowed=%v", d.Results[0].Policy, d.Results[0].Remaining,
			d.Results[1].Policy, d.Results[1].Remaining, d.Allowed)
	}
	app := fiber.New(fiber.Config{
		DisableStartupMessage: true,
		ErrorHandler: func(c *fiber.Ctx, err error) error {
			c.Set("X-Seen", seen(c))
			var fe *fiber.Error
			require.True(t, errors.As(err, &fe))
			return c.SendStatus(fe.Code)
		},
	})
	app.Use(fiberlimit.New(global))
	app.Get("/", fiberlimit.New(route), func(c *fiber.Ctx) error {
		if c.Query("fail") != "" {
			return fiber.NewError(fiber.StatusTeapot)
		}
		c.Set("X-Seen", seen(c))
		return c.SendString("ok")
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = app.Listener(ln) }()
	t.Cleanup(func() { _ = app.ShutdownWithTimeout(5 * time.Second) })

	const clients, requests = 8, 25
	client := &http.Client{Timeout: 5 * time.Second}
	var wg sync.WaitGroup
	errs := make(chan error, clients*requests)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range requests {
				url := "http://" + ln.Addr().String() + "/"
				want := fiber.StatusOK
				if j%2 == 1 {
					url, want = url+"?fail=1", fiber.StatusTeapot
				}
				req, err := http.NewRequest(http.MethodGet, url, nil)
				if err != nil {
					errs <- err
					return
				}
				req.Header.Set("X-API-Key", fmt.Sprintf("client-%d", i))
				res, err := client.Do(req)
				if err != nil {
					errs <- err
					return
				}
				_ = res.Body.Close()
				got := fmt.Sprintf("%d %s", res.StatusCode, res.Header.Get("X-Seen"))
				if exp := fmt.Sprintf("%d global=%d route=%d allowed=true", want, 999-j, 999-j); got != exp {
					errs <- fmt.Errorf("client %d request %d: %q, want %q", i, j, got, exp)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// keyfunc.IP keys an IPv4 peer with the text the middleware formats into
// its pooled state (keyfunc.PeerTextRequest), which is zeroed when the
// request ends: the store keeps a copy of the key, so each peer's count
// goes on from one request to the next (a map key zeroed under the store
// would start every round afresh), and each request is keyed by its own
// peer.
func TestPeerTextKeysSurvivePoolReuse(t *testing.T) {
	t.Parallel()
	mem, _ := newStore(t)
	store := &recordingStore{Store: mem}
	l := newLimiter(t, store, core.Policy{Name: "per-ip", Key: keyfunc.IP(), Limit: core.PerMinute(1000)})
	app := fiber.New()
	app.Get("/", fiberlimit.New(l), func(c *fiber.Ctx) error { return c.SendString("ok") })
	h := app.Handler()
	peers := []net.IP{net.IPv4(203, 0, 113, 7), net.IPv4(198, 51, 100, 23), net.IPv4(192, 0, 2, 255)}
	for round := range 3 {
		for _, ip := range peers {
			var fctx fasthttp.RequestCtx
			var req fasthttp.Request
			req.SetRequestURI("/")
			fctx.Init(&req, &net.TCPAddr{IP: ip, Port: 5555}, nil)
			h(&fctx)
			require.Equal(t, fiber.StatusOK, fctx.Response.StatusCode())
			require.Equal(t, fmt.Sprint(999-round), string(fctx.Response.Header.Peek("X-RateLimit-Remaining")), "%v round %d", ip, round)
			fctx.ResetUserValues() // the request ends: its state goes back to the pool, zeroed
		}
	}
	require.Len(t, store.keys, 9)
	for i, k := range store.keys {
		require.Equal(t, core.Key{Identity: peers[i%3].String(), Policy: "per-ip"}, k, "store key %d", i)
	}
}
