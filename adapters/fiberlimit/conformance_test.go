package fiberlimit_test

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/adapters/fiberlimit"
	"github.com/sluicehq/sluice/adapters/internal/adaptertest"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// harness runs the adapter conformance suite against fiberlimit. fasthttp
// does not recover handlers: a panic the middleware does not contain takes
// the test process down.
type harness struct{}

// GlobalRoute: Fiber gives app.Use middleware the Use prefix.
func (harness) GlobalRoute(string, string) string { return "/" }

var fiberRouters = map[string]fiber.Config{
	"default":       {},
	"CaseSensitive": {CaseSensitive: true},
	"StrictRouting": {StrictRouting: true},
	"UnescapePath":  {UnescapePath: true},
	"all":           {CaseSensitive: true, StrictRouting: true, UnescapePath: true},
}

// Routers: Fiber routes "/LOGIN" and "/login/" to "/login" by default.
func (harness) Routers() []string {
	return []string{"default", "CaseSensitive", "StrictRouting", "UnescapePath", "all"}
}

type fiberServer struct {
	h    fasthttp.RequestHandler
	runs atomic.Int64
}

func options(s adaptertest.Setup) []fiberlimit.Option {
	var opts []fiberlimit.Option
	if s.Logger != nil {
		opts = append(opts, fiberlimit.WithLogger(s.Logger))
	}
	if s.OnError != nil {
		opts = append(opts, fiberlimit.WithErrorHandler(func(c *fiber.Ctx, err error) (bool, error) {
			return s.OnError(err), fiber.NewError(fiber.StatusServiceUnavailable, adaptertest.Refused) // to Fiber's ErrorHandler
		}))
	}
	if s.Cost {
		opts = append(opts, fiberlimit.WithCost(func(c *fiber.Ctx) int64 { return adaptertest.CostOf(c.Get("X-Cost")) }))
	}
	if s.Skip {
		opts = append(opts, fiberlimit.WithSkip(func(c *fiber.Ctx) bool { return c.Get("X-Skip") != "" }))
	}
	if s.Key != nil {
		opts = append(opts, fiberlimit.WithKey(s.Key))
	}
	if s.Headers != nil {
		opts = append(opts, fiberlimit.WithHeaders(*s.Headers))
	}
	if s.Denied {
		opts = append(opts, fiberlimit.WithDeniedHandler(func(c *fiber.Ctx) error {
			d, ok := fiberlimit.DecisionFrom(c)
			return c.Status(fiber.StatusTooManyRequests).SendString(adaptertest.DeniedBody(d, ok, c.GetRespHeader("Retry-After")))
		}))
	}
	switch s.Panic {
	case adaptertest.KeyCallback:
		opts = append(opts, fiberlimit.WithKey(func(keyfunc.Request) (string, error) { panic("boom") }))
	case adaptertest.SkipCallback:
		opts = append(opts, fiberlimit.WithSkip(func(*fiber.Ctx) bool { panic("boom") }))
	case adaptertest.CostCallback:
		opts = append(opts, fiberlimit.WithCost(func(*fiber.Ctx) int64 { panic("boom") }))
	}
	return opts
}

func (harness) Start(t *testing.T, s adaptertest.Setup) adaptertest.Server {
	opts := options(s)
	app := fiber.New(fiberRouters[s.Router])
	srv := &fiberServer{}
	// The request's context (UserContext) holds ContextValue; a gone
	// client's is cancelled, as an app that ties it to the connection sees.
	app.Use(func(c *fiber.Ctx) error {
		ctx := context.WithValue(c.UserContext(), adaptertest.ContextKey{}, adaptertest.ContextValue)
		if c.Get("X-Gone") != "" {
			var cancel context.CancelFunc
			ctx, cancel = context.WithCancel(ctx)
			cancel()
		}
		c.SetUserContext(ctx)
		return c.Next()
	})
	if s.Limiter != nil {
		app.Use(fiberlimit.New(s.Limiter, opts...))
	}
	route := func(path, name string) {
		var hs []fiber.Handler
		if rl, ok := s.Routes[name]; ok {
			ropts := slices.Clip(opts)
			if rl.Key != nil {
				ropts = append(ropts, fiberlimit.WithKey(rl.Key))
			}
			hs = append(hs, fiberlimit.New(rl.Limiter, ropts...))
		}
		hs = append(hs, func(c *fiber.Ctx) error {
			srv.runs.Add(1)
			d, ok := fiberlimit.DecisionFrom(c)
			c.Set(adaptertest.HeaderRoute, name)
			c.Set(adaptertest.HeaderForm, c.FormValue("username"))
			if s.InHandler != nil {
				s.InHandler(fiberlimit.Request(c), c)
			}
			c.Set(adaptertest.HeaderDecision, adaptertest.Describe(d, ok, c.Locals(fiberlimit.DecisionKey)))
			return c.Status(adaptertest.StatusOf(c.Get(adaptertest.HeaderStatus))).SendString("hello")
		})
		app.Get(path, hs...)
		app.Post(path, hs...)
	}
	route("/", "root")
	route("/login", "login")
	route("/files/:name", "files")
	srv.h = app.Handler() // after the routes: it builds the route tree
	return srv
}

// Package, FormKey and Access: fiberlimit.KeyFunc over fiberlimit.Context.
func (harness) Package() string { return "fiberlimit" }

func (harness) FormKey(field string) keyfunc.Func {
	return fiberlimit.KeyFunc(func(c *fiber.Ctx) (string, error) { return c.FormValue(field), nil })
}

func (harness) Access(r keyfunc.Request) (bool, any) {
	v, ok := fiberlimit.Context(r)
	if v == nil {
		return ok, nil
	}
	return ok, v
}

// Serve and MaxAllocs: an allowed request costs the middleware no
// allocation over the bare app, with an IP key or a header key: its
// Decision, and the peer's address as text (keyfunc.PeerTextRequest), are
// in state from the middleware's pool that goes back when Locals are
// emptied (ResetUserValues, as the server does), and the header values are
// written from a buffer on the stack, which fasthttp copies.
func (harness) Serve(_ *testing.T, l *core.Limiter) func() {
	app := fiber.New()
	if l != nil {
		app.Use(fiberlimit.New(l))
	}
	app.Get("/", func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusNoContent) })
	h := app.Handler()
	var req fasthttp.Request
	req.SetRequestURI("/")
	req.Header.Set("X-API-Key", "k-0123456789")
	var fctx fasthttp.RequestCtx
	fctx.Init(&req, &net.TCPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 5555}, nil)
	return func() {
		fctx.Response.Reset()
		fctx.ResetUserValues()
		h(&fctx)
	}
}

func (harness) MaxAllocs() (byIP, byHeader float64) { return raceAllocs, raceAllocs }

// Do parses r from the wire as a fasthttp server would (as app.Test does)
// and serves it from r.Remote on a RequestCtx of its own.
func (s *fiberServer) Do(t *testing.T, r adaptertest.Request) adaptertest.Response {
	hr := adaptertest.HTTPRequest(t, r)
	if r.Gone {
		hr.Header.Set("X-Gone", "1")
	}
	if r.Form != nil { // DumpRequest does not write the body's length
		hr.Header.Set("Content-Length", strconv.FormatInt(hr.ContentLength, 10))
	}
	raw, err := httputil.DumpRequest(hr, r.Form != nil)
	require.NoError(t, err)
	var req fasthttp.Request
	require.NoError(t, req.Read(bufio.NewReader(bytes.NewReader(raw))))
	var remote net.Addr = &net.UnixAddr{Name: adaptertest.NoAddress, Net: "unix"}
	if r.Remote != adaptertest.NoAddress {
		remote, err = net.ResolveTCPAddr("tcp", hr.RemoteAddr)
		require.NoError(t, err)
	}
	var fctx fasthttp.RequestCtx
	fctx.Init(&req, remote, nil)
	s.h(&fctx)
	h := http.Header{}
	fctx.Response.Header.VisitAll(func(k, v []byte) { h.Add(string(k), string(v)) })
	return adaptertest.Response{Status: fctx.Response.StatusCode(), Header: h, Body: string(fctx.Response.Body()), Ran: h.Get(adaptertest.HeaderRoute)}
}

func (s *fiberServer) Runs() int64 { return s.runs.Load() }

// TestConformance runs the behaviour every adapter shares.
func TestConformance(t *testing.T) {
	t.Parallel()
	adaptertest.Run(t, harness{})
}

// TestMiddlewareAllocations bounds what the middleware allocates for an
// allowed request (MaxAllocs).
func TestMiddlewareAllocations(t *testing.T) { adaptertest.RunAllocations(t, harness{}) }
