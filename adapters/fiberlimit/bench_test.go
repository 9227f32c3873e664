package fiberlimit_test

import (
	"net"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/adapters/fiberlimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// BenchmarkMiddleware measures the middleware's cost: the same Fiber app,
// driven through fasthttp directly with one reused RequestCtx (as a server
// worker reuses it), with and without the limiter, on a memory store and
// one key that is never denied. The difference between "bare" and a
// limited case is the middleware's overhead per request.
func BenchmarkMiddleware(b *testing.B) {
	store, err := memorystore.New()
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	ip := keyfunc.IP()
	limit := core.PerSecond(core.MaxRate) // never denied, so every request takes the full path
	cases := []struct {
		name string
		mw   []fiber.Handler
	}{
		{"bare", nil},
		{"limited/ip", []fiber.Handler{fiberlimit.New(mustLimiter(b, store, core.Policy{Name: "per-ip", Key: ip, Limit: limit}))}},
		{"limited/api-key", []fiber.Handler{fiberlimit.New(mustLimiter(b, store, core.Policy{Name: "per-key", Key: keyfunc.Header("X-API-Key"), Limit: limit}))}},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			app := fiber.New()
			for _, mw := range bc.mw {
				app.Use(mw)
			}
			app.Get("/hello", func(c *fiber.Ctx) error { return c.SendString("hello") })
			h := app.Handler()

			var req fasthttp.Request
			req.SetRequestURI("/hello")
			req.Header.Set("X-API-Key", "k-0123456789")
			var fctx fasthttp.RequestCtx
			fctx.Init(&req, &net.TCPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 5555}, nil)
			serve := func() {
				fctx.Response.Reset()
				fctx.ResetUserValues()
				h(&fctx)
			}
			serve()
			if fctx.Response.StatusCode() != fiber.StatusOK || (bc.mw != nil) != (len(fctx.Response.Header.Peek("RateLimit")) > 0) {
				b.Fatalf("status %d, RateLimit %q", fctx.Response.StatusCode(), fctx.Response.Header.Peek("RateLimit"))
			}
			b.ReportAllocs()
			for b.Loop() {
				serve()
			}
		})
	}
}

func mustLimiter(b *testing.B, s core.Store, p core.Policy) *core.Limiter {
	l, err := core.NewLimiter(s, []core.Policy{p})
	if err != nil {
		b.Fatal(err)
	}
	return l
}
