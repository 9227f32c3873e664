package echolimit_test

import (
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/adapters/echolimit"
	"github.com/sluicehq/sluice/adapters/internal/adaptertest"
	"github.com/sluicehq/sluice/keyfunc"
)

// harness runs the adapter conformance suite against echolimit (no
// middleware.Recover: a panic the middleware does not contain fails the
// test).
type harness struct{}

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
	ran  string
}

func (harness) Start(t *testing.T, s adaptertest.Setup) adaptertest.Server {
	var opts []echolimit.Option
	if s.Logger != nil {
		opts = append(opts, echolimit.WithLogger(s.Logger))
	}
	if s.OnError != nil {
		opts = append(opts, echolimit.WithErrorHandler(func(c echo.Context, err error) (bool, error) {
			return s.OnError(err), echo.ErrServiceUnavailable
		}))
	}
	if s.Cost {
		opts = append(opts, echolimit.WithCost(func(c echo.Context) int64 { return adaptertest.CostOf(c.Request().Header.Get("X-Cost")) }))
	}
	if s.Skip {
		opts = append(opts, echolimit.WithSkip(func(c echo.Context) bool { return c.Request().Header.Get("X-Skip") != "" }))
	}
	switch s.Panic {
	case adaptertest.KeyCallback:
		opts = append(opts, echolimit.WithKey(func(keyfunc.Request) (string, error) { panic("boom") }))
	case adaptertest.SkipCallback:
		opts = append(opts, echolimit.WithSkip(func(echo.Context) bool { panic("boom") }))
	case adaptertest.CostCallback:
		opts = append(opts, echolimit.WithCost(func(echo.Context) int64 { panic("boom") }))
	}
	srv := &echoServer{e: newEcho()}
	if s.Router != "" {
		echoRouters[s.Router](srv.e)
	}
	srv.e.Use(echolimit.New(s.Limiter, opts...))
	route := func(name string) echo.HandlerFunc {
		return func(c echo.Context) error {
			srv.runs.Add(1)
			srv.ran = name
			_, decided := echolimit.DecisionFrom(c)
			c.Response().Header().Set(adaptertest.HeaderDecided, strconv.FormatBool(decided))
			return c.String(http.StatusOK, "hello")
		}
	}
	srv.e.GET("/", route("root"))
	srv.e.GET("/login", route("login"))
	srv.e.GET("/files/:name", route("files"))
	return srv
}

func (s *echoServer) Do(t *testing.T, r adaptertest.Request) adaptertest.Response {
	return adaptertest.ServeHTTP(t, s.e, r, &s.ran)
}

func (s *echoServer) Runs() int64 { return s.runs.Load() }

// TestConformance runs the behaviour every adapter shares.
func TestConformance(t *testing.T) { adaptertest.Run(t, harness{}) }
