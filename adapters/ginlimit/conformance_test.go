package ginlimit_test

import (
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/adapters/ginlimit"
	"github.com/sluicehq/sluice/adapters/httplimit"
	"github.com/sluicehq/sluice/adapters/internal/adaptertest"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	os.Exit(m.Run())
}

// harness runs the adapter conformance suite against ginlimit (no
// gin.Recovery: a panic the middleware does not contain fails the test).
type harness struct{}

// GlobalRoute: Gin routes before it runs the middleware.
func (harness) GlobalRoute(template, path string) string {
	if template == "" {
		return path
	}
	return strings.ReplaceAll(template, "{name}", ":name")
}

var ginRouters = map[string]func(*gin.Engine){
	"default":           func(*gin.Engine) {},
	"RemoveExtraSlash":  func(e *gin.Engine) { e.RemoveExtraSlash = true },
	"UseRawPath":        func(e *gin.Engine) { e.UseRawPath = true },
	"UseEscapedPath":    func(e *gin.Engine) { e.UseEscapedPath = true },
	"RedirectFixedPath": func(e *gin.Engine) { e.RedirectFixedPath = true },
}

func (harness) Routers() []string {
	return []string{"default", "RemoveExtraSlash", "UseRawPath", "UseEscapedPath", "RedirectFixedPath"}
}

type ginServer struct {
	r    *gin.Engine
	runs atomic.Int64
}

func options(s adaptertest.Setup) []ginlimit.Option {
	var opts []ginlimit.Option
	if s.Logger != nil {
		opts = append(opts, ginlimit.WithLogger(s.Logger))
	}
	if s.OnError != nil {
		opts = append(opts, ginlimit.WithErrorHandler(func(c *gin.Context, err error) bool {
			if s.OnError(err) {
				return true
			}
			c.String(http.StatusServiceUnavailable, adaptertest.Refused) // no Abort: the middleware aborts
			return false
		}))
	}
	if s.Cost {
		opts = append(opts, ginlimit.WithCost(func(c *gin.Context) int64 { return adaptertest.CostOf(c.GetHeader("X-Cost")) }))
	}
	if s.Skip {
		opts = append(opts, ginlimit.WithSkip(func(c *gin.Context) bool { return c.GetHeader("X-Skip") != "" }))
	}
	if s.Key != nil {
		opts = append(opts, ginlimit.WithKey(s.Key))
	}
	if s.Headers != nil {
		opts = append(opts, ginlimit.WithHeaders(*s.Headers))
	}
	if s.Denied {
		opts = append(opts, ginlimit.WithDeniedHandler(func(c *gin.Context) {
			d, ok := ginlimit.DecisionFrom(c)
			c.String(http.StatusTooManyRequests, adaptertest.DeniedBody(d, ok, c.Writer.Header().Get("Retry-After")))
		}))
	}
	switch s.Panic {
	case adaptertest.KeyCallback:
		opts = append(opts, ginlimit.WithKey(func(keyfunc.Request) (string, error) { panic("boom") }))
	case adaptertest.SkipCallback:
		opts = append(opts, ginlimit.WithSkip(func(*gin.Context) bool { panic("boom") }))
	case adaptertest.CostCallback:
		opts = append(opts, ginlimit.WithCost(func(*gin.Context) int64 { panic("boom") }))
	}
	return opts
}

func (harness) Start(t *testing.T, s adaptertest.Setup) adaptertest.Server {
	opts := options(s)
	srv := &ginServer{r: gin.New()}
	if s.Router != "" {
		ginRouters[s.Router](srv.r)
	}
	if s.Limiter != nil {
		srv.r.Use(ginlimit.New(s.Limiter, opts...))
	}
	route := func(name string) []gin.HandlerFunc {
		var hs []gin.HandlerFunc
		if rl, ok := s.Routes[name]; ok {
			ropts := slices.Clip(opts)
			if rl.Key != nil {
				ropts = append(ropts, ginlimit.WithKey(rl.Key))
			}
			hs = append(hs, ginlimit.New(rl.Limiter, ropts...))
		}
		return append(hs, func(c *gin.Context) {
			srv.runs.Add(1)
			d, ok := ginlimit.DecisionFrom(c)
			v, _ := c.Get(ginlimit.DecisionKey)
			hd, _ := httplimit.DecisionFrom(c.Request.Context())
			c.Header(adaptertest.HeaderRoute, name)
			c.Header(adaptertest.HeaderForm, c.PostForm("username"))
			if s.InHandler != nil {
				s.InHandler(ginlimit.Request(c), c)
			}
			c.Header(adaptertest.HeaderDecision, adaptertest.Describe(d, ok, v, hd))
			c.String(adaptertest.StatusOf(c.GetHeader(adaptertest.HeaderStatus)), "hello")
		})
	}
	srv.r.GET("/", route("root")...)
	srv.r.GET("/login", route("login")...)
	srv.r.POST("/login", route("login")...)
	srv.r.GET("/files/:name", route("files")...)
	return srv
}

// Package, FormKey and Access: ginlimit.KeyFunc over ginlimit.Context.
func (harness) Package() string { return "ginlimit" }

func (harness) FormKey(field string) keyfunc.Func {
	return ginlimit.KeyFunc(func(c *gin.Context) (string, error) { return c.PostForm(field), nil })
}

func (harness) Access(r keyfunc.Request) (bool, any) {
	v, ok := ginlimit.Context(r)
	if v == nil {
		return ok, nil
	}
	return ok, v
}

// Serve and MaxAllocs: an allowed request costs the middleware three
// allocations over the bare engine: its state (the Decision, header values
// and context in one Scratch) and gin's Keys map that holds the Decision;
// keyed by a header, a fourth: net/http's canonical form of its name.
func (harness) Serve(_ *testing.T, l *core.Limiter) func() {
	e := gin.New()
	if l != nil {
		e.Use(ginlimit.New(l))
	}
	e.GET("/", func(c *gin.Context) { c.Status(http.StatusNoContent) })
	return adaptertest.ServeFunc(e)
}

func (harness) MaxAllocs() (byIP, byHeader float64) { return 3 + raceAllocs, 4 + raceAllocs }

func (s *ginServer) Do(t *testing.T, r adaptertest.Request) adaptertest.Response {
	return adaptertest.ServeHTTP(t, s.r, r)
}

func (s *ginServer) Runs() int64 { return s.runs.Load() }

// TestConformance runs the behaviour every adapter shares.
func TestConformance(t *testing.T) { adaptertest.Run(t, harness{}) }

// TestMiddlewareAllocations bounds what the middleware allocates for an
// allowed request (MaxAllocs).
func TestMiddlewareAllocations(t *testing.T) { adaptertest.RunAllocations(t, harness{}) }
