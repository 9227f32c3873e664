package mwbench

import (
	"fmt"
	"net"
	"testing"

	"github.com/gofiber/fiber/v2"
	fiberlim "github.com/gofiber/fiber/v2/middleware/limiter"
	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/adapters/fiberlimit"
	"github.com/sluicehq/sluice/ratelimitfields"
)

// FiberImpl is one Fiber (fasthttp) middleware under comparison.
type FiberImpl struct {
	// Name is the sub-benchmark and -impls name.
	Name string
	// Label describes it in the report.
	Label string
	// Module is the module whose version the report prints ("" for none).
	Module string
	// Baseline is true for the bare Fiber app; Peer for Fiber's own limiter.
	Baseline, Peer bool
	// Headers lists the header fields it sets on an allowed response.
	Headers string
	// Handlers returns the middleware to register with app.Use (none for the
	// baseline), on a fresh store, and a function that releases the store.
	Handlers func() ([]fiber.Handler, func(), error)
}

// FiberImpls returns the bare Fiber app, sluice's fiberlimit (all its
// headers, then only the X-RateLimit-* family) and Fiber's limiter
// middleware (its default fixed window, then its sliding window), each on its
// in-memory store with Rate requests per Period per client IP.
func FiberImpls() []FiberImpl {
	const xrl = "X-RateLimit-Limit, -Remaining, -Reset"
	return []FiberImpl{
		{Name: "bare", Label: "bare Fiber app (baseline)", Module: "github.com/gofiber/fiber/v2", Baseline: true, Headers: "none",
			Handlers: func() ([]fiber.Handler, func(), error) { return nil, func() {}, nil }},
		{Name: "sluice", Label: "sluice fiberlimit (default headers)", Module: "github.com/sluicehq/sluice/adapters/fiberlimit",
			Headers: "RateLimit-Policy, RateLimit, " + xrl + ", X-RateLimit-State", Handlers: sluiceFiber(ratelimitfields.Config{})},
		{Name: "sluice-xrl", Label: "sluice fiberlimit, X-RateLimit-* only", Module: "github.com/sluicehq/sluice/adapters/fiberlimit",
			Headers: xrl, Handlers: sluiceFiber(ratelimitfields.Config{Omit: ratelimitfields.Draft | ratelimitfields.State})},
		{Name: "fiber", Label: "Fiber middleware/limiter (fixed window, default)", Module: "github.com/gofiber/fiber/v2", Peer: true,
			Headers: xrl, Handlers: fiberLimiter(fiberlim.FixedWindow{})},
		{Name: "fiber-sliding", Label: "Fiber middleware/limiter (sliding window)", Module: "github.com/gofiber/fiber/v2", Peer: true,
			Headers: xrl, Handlers: fiberLimiter(fiberlim.SlidingWindow{})},
	}
}

// sluice: fiberlimit.New on the same core.Limiter as the net/http
// middleware (one keyfunc.IP() policy, default memory store).
func sluiceFiber(h ratelimitfields.Config) func() ([]fiber.Handler, func(), error) {
	return func() ([]fiber.Handler, func(), error) {
		l, done, err := SluiceLimiter()
		if err != nil {
			return nil, nil, err
		}
		return []fiber.Handler{fiberlimit.New(l, fiberlimit.WithHeaders(h))}, done, nil
	}
}

// fiber: middleware/limiter with Max Rate, Expiration Period, its default
// key (c.IP(), the transport peer without proxy configuration) and its
// default in-memory storage.
func fiberLimiter(algorithm fiberlim.LimiterHandler) func() ([]fiber.Handler, func(), error) {
	return func() ([]fiber.Handler, func(), error) {
		mw := fiberlim.New(fiberlim.Config{Max: Rate, Expiration: Period, LimiterMiddleware: algorithm})
		return []fiber.Handler{mw}, func() {}, nil
	}
}

// FiberApp is one Fiber app under test, driven through its fasthttp handler
// with one reused RequestCtx, as a fasthttp server worker reuses it: no
// network, no goroutine per request.
type FiberApp struct {
	handler fasthttp.RequestHandler
	req     fasthttp.Request
	ctx     fasthttp.RequestCtx
}

// NewFiberApp builds a Fiber app with mws registered by app.Use in front of
// a bare handler on GET /api/items (it only sets status 200), and its
// request: GET /api/items from ClientAddr, no forwarding headers.
func NewFiberApp(mws []fiber.Handler) (*FiberApp, error) {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	for _, mw := range mws {
		app.Use(mw)
	}
	app.Get("/api/items", func(c *fiber.Ctx) error {
		c.Status(fiber.StatusOK)
		return nil
	})
	a := &FiberApp{handler: app.Handler()}
	a.req.SetRequestURI("/api/items")
	a.req.Header.SetMethod(fasthttp.MethodGet)
	a.req.Header.SetHost("example.com")
	addr, err := net.ResolveTCPAddr("tcp", ClientAddr)
	if err != nil {
		return nil, err
	}
	a.ctx.Init(&a.req, addr, nil)
	return a, nil
}

// Serve serves the request once, after clearing the previous response.
func (a *FiberApp) Serve() {
	a.ctx.Response.Reset()
	a.ctx.ResetUserValues()
	a.handler(&a.ctx)
}

// Status is the status code of the last response.
func (a *FiberApp) Status() int { return a.ctx.Response.StatusCode() }

// Header returns the value of the last response's header field name.
func (a *FiberApp) Header(name string) string { return string(a.ctx.Response.Header.Peek(name)) }

// Check serves one request and reports whether it was admitted, with
// rate-limit headers if limited is set.
func (a *FiberApp) Check(limited bool) error {
	a.Serve()
	if a.Status() != fiber.StatusOK {
		return fmt.Errorf("status %d, want 200", a.Status())
	}
	if limited && a.Header("X-RateLimit-Remaining") == "" {
		return fmt.Errorf("no X-RateLimit-Remaining header in %q", a.ctx.Response.Header.String())
	}
	return nil
}

// FiberOverhead serves b.N requests from one client IP through impl's Fiber
// app, reusing one RequestCtx. The benchmark fails if a response is not 200
// or, for a middleware, lacks X-RateLimit-Remaining.
func FiberOverhead(b *testing.B, impl FiberImpl) {
	mws, done, err := impl.Handlers()
	if err != nil {
		fatalf(b, "%s: %v", impl.Name, err)
	}
	defer done()
	a, err := NewFiberApp(mws)
	if err != nil {
		fatalf(b, "%s: %v", impl.Name, err)
	}
	if err := a.Check(!impl.Baseline); err != nil { // also creates the client's key
		fatalf(b, "%s: %v", impl.Name, err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		a.Serve()
	}
	b.StopTimer()
	if a.Status() != fiber.StatusOK {
		fatalf(b, "%s: last response %d, want 200 (the limit is %d per %s)", impl.Name, a.Status(), Rate, Period)
	}
}

// RunAllFiber runs scenario as one sub-benchmark per Fiber implementation.
func RunAllFiber(b *testing.B, scenario func(*testing.B, FiberImpl)) {
	for _, impl := range FiberImpls() {
		b.Run(impl.Name, func(b *testing.B) { scenario(b, impl) })
	}
}
