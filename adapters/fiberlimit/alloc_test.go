package fiberlimit_test

import (
	"net"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/adapters/fiberlimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// An allowed request costs the middleware no allocation over the bare app,
// with an IP key or a header key: its Decision, and the peer's address as
// text (keyfunc.PeerTextRequest), are in state from the middleware's pool
// that goes back when Locals are emptied (ResetUserValues, as the server
// does), and the header values are written from a buffer on the stack,
// which fasthttp copies.
func TestMiddlewareAllocations(t *testing.T) {
	store, err := memorystore.New()
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	limit := core.Per(1_000_000_000, time.Second)
	allocs := func(mw ...fiber.Handler) float64 {
		app := fiber.New()
		for _, m := range mw {
			app.Use(m)
		}
		app.Get("/", func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusNoContent) })
		h := app.Handler()
		var req fasthttp.Request
		req.SetRequestURI("/")
		req.Header.Set("X-API-Key", "k-0123456789")
		var fctx fasthttp.RequestCtx
		fctx.Init(&req, &net.TCPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 5555}, nil)
		return leastAllocs(func() {
			fctx.Response.Reset()
			fctx.ResetUserValues()
			h(&fctx)
		})
	}
	limiter := func(key keyfunc.Func) *core.Limiter {
		l, err := core.NewLimiter(store, []core.Policy{{Name: "p", Key: key, Limit: limit}})
		require.NoError(t, err)
		return l
	}
	bare := allocs()
	byIP := allocs(fiberlimit.New(limiter(keyfunc.IP())))
	byKey := allocs(fiberlimit.New(limiter(keyfunc.Header("X-API-Key"))))
	require.LessOrEqual(t, byIP-bare, 0.0+raceAllocs, "bare %v, by IP %v", bare, byIP)
	require.LessOrEqual(t, byKey-bare, 0.0+raceAllocs, "bare %v, by key %v", bare, byKey)
}

// leastAllocs is the fewest allocations f makes in a run, over five
// measurements: testing.AllocsPerRun counts every goroutine's allocations,
// and one that another test left running (a breaker probing a stopped
// Redis, say) only ever adds to them.
func leastAllocs(f func()) float64 {
	least := testing.AllocsPerRun(100, f)
	for range 4 {
		time.Sleep(time.Millisecond)
		least = min(least, testing.AllocsPerRun(100, f))
	}
	return least
}
