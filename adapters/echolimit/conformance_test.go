package echolimit_test

import (
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/adapters/echolimit"
	"github.com/sluicehq/sluice/adapters/httplimit"
	"github.com/sluicehq/sluice/adapters/internal/adaptertest"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// harness runs the adapter conformance suite against echolimit (no
// middleware.Recover: a panic the middleware does not contain fails the
// test).
type harness struct{}

// GlobalRoute: Echo routes before it runs the middleware.
func (harness) GlobalRoute(template, path string) string {
	if template == "" {
		return path
	}
	return strings.ReplaceAll(template, "{name}", ":name")
}

var echoRouters = map[string]func(*echo.Echo){
	"default": func(*echo.Echo) {},
	"RemoveTrailingSlash": func(e *echo.Echo) {
		e.Pre(func(next echo.HandlerFunc) echo.HandlerFunc { // as middleware.RemoveTrailingSlash
			return func(c echo.Context) error {
				if p := c.Request().URL.Path; len(p) > 1 && strings.HasSuffix(p, "/") {
					c.Request().URL.Path = strings.TrimSuffix(p, "/")
					c.Request().URL.RawPath = ""
				}
				return next(c)
			}
		})
	},
}

// Routers: Echo routes "/files//a" to "/files/:name", and "/files/a%2Fb"
// as one segment.
func (harness) Routers() []string { return []string{"default", "RemoveTrailingSlash"} }

type echoServer struct {
	e    *echo.Echo
	runs atomic.Int64
}

func options(s adaptertest.Setup) []echolimit.Option {
	var opts []echolimit.Option
	if s.Logger != nil {
		opts = append(opts, echolimit.WithLogger(s.Logger))
	}
	if s.OnError != nil {
		opts = append(opts, echolimit.WithErrorHandler(func(c echo.Context, err error) (bool, error) {
			return s.OnError(err), echo.NewHTTPError(http.StatusServiceUnavailable, adaptertest.Refused)
		}))
	}
	if s.Cost {
		opts = append(opts, echolimit.WithCost(func(c echo.Context) int64 { return adaptertest.CostOf(c.Request().Header.Get("X-Cost")) }))
	}
	if s.Skip {
		opts = append(opts, echolimit.WithSkip(func(c echo.Context) bool { return c.Request().Header.Get("X-Skip") != "" }))
	}
	if s.Key != nil {
		opts = append(opts, echolimit.WithKey(s.Key))
	}
	if s.Headers != nil {
		opts = append(opts, echolimit.WithHeaders(*s.Headers))
	}
	if s.Denied {
		opts = append(opts, echolimit.WithDeniedHandler(func(c echo.Context) error {
			d, ok := echolimit.DecisionFrom(c)
			return c.String(http.StatusTooManyRequests, adaptertest.DeniedBody(d, ok, c.Response().Header().Get("Retry-After")))
		}))
	}
	switch s.Panic {
	case adaptertest.KeyCallback:
		opts = append(opts, echolimit.WithKey(func(keyfunc.Request) (string, error) { panic("boom") }))
	case adaptertest.SkipCallback:
		opts = append(opts, echolimit.WithSkip(func(echo.Context) bool { panic("boom") }))
	case adaptertest.CostCallback:
		opts = append(opts, echolimit.WithCost(func(echo.Context) int64 { panic("boom") }))
	}
	return opts
}

func (harness) Start(t *testing.T, s adaptertest.Setup) adaptertest.Server {
	opts := options(s)
	srv := &echoServer{e: newEcho()}
	if s.Router != "" {
		echoRouters[s.Router](srv.e)
	}
	if s.Limiter != nil {
		srv.e.Use(echolimit.New(s.Limiter, opts...))
	}
	route := func(path, name string) {
		var mws []echo.MiddlewareFunc
		if rl, ok := s.Routes[name]; ok {
			ropts := slices.Clip(opts)
			if rl.Key != nil {
				ropts = append(ropts, echolimit.WithKey(rl.Key))
			}
			mws = append(mws, echolimit.New(rl.Limiter, ropts...))
		}
		srv.e.Match([]string{http.MethodGet, http.MethodPost}, path, func(c echo.Context) error {
			srv.runs.Add(1)
			d, ok := echolimit.DecisionFrom(c)
			hd, _ := httplimit.DecisionFrom(c.Request().Context())
			c.Response().Header().Set(adaptertest.HeaderRoute, name)
			c.Response().Header().Set(adaptertest.HeaderForm, c.FormValue("username"))
			if s.InHandler != nil {
				s.InHandler(echolimit.Request(c), c)
			}
			c.Response().Header().Set(adaptertest.HeaderDecision, adaptertest.Describe(d, ok, c.Get(echolimit.DecisionKey), hd))
			return c.String(adaptertest.StatusOf(c.Request().Header.Get(adaptertest.HeaderStatus)), "hello")
		}, mws...)
	}
	route("/", "root")
	route("/login", "login")
	route("/files/:name", "files")
	return srv
}

// Package, FormKey and Access: echolimit.KeyFunc over echolimit.Context.
func (harness) Package() string { return "echolimit" }

func (harness) FormKey(field string) keyfunc.Func {
	return echolimit.KeyFunc(func(c echo.Context) (string, error) { return c.FormValue(field), nil })
}

func (harness) Access(r keyfunc.Request) (bool, any) {
	v, ok := echolimit.Context(r)
	if v == nil {
		return ok, nil
	}
	return ok, v
}

// Serve and MaxAllocs: an allowed request costs the middleware four
// allocations over the bare Echo: its state (the view, the Decision,
// header values and context in one allocation), the closure Echo builds
// around each middleware, and Echo's store that holds the Decision; keyed
// by a header, a fifth: net/http's canonical form of its name.
func (harness) Serve(_ *testing.T, l *core.Limiter) func() {
	e := echo.New()
	if l != nil {
		e.Use(echolimit.New(l))
	}
	e.GET("/", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })
	return adaptertest.ServeFunc(e)
}

func (harness) MaxAllocs() (byIP, byHeader float64) { return 4 + raceAllocs, 5 + raceAllocs }

func (s *echoServer) Do(t *testing.T, r adaptertest.Request) adaptertest.Response {
	return adaptertest.ServeHTTP(t, s.e, r)
}

func (s *echoServer) Runs() int64 { return s.runs.Load() }

// TestConformance runs the behaviour every adapter shares.
func TestConformance(t *testing.T) { adaptertest.Run(t, harness{}) }

// TestMiddlewareAllocations bounds what the middleware allocates for an
// allowed request (MaxAllocs).
func TestMiddlewareAllocations(t *testing.T) { adaptertest.RunAllocations(t, harness{}) }
