package ginlimit_test

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/adapters/ginlimit"
	"github.com/sluicehq/sluice/adapters/internal/adaptertest"
	"github.com/sluicehq/sluice/keyfunc"
)

// harness runs the adapter conformance suite against ginlimit (no
// gin.Recovery: a panic the middleware does not contain fails the test).
type harness struct{}

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
	ran  string
}

func (harness) Start(t *testing.T, s adaptertest.Setup) adaptertest.Server {
	var opts []ginlimit.Option
	if s.Logger != nil {
		opts = append(opts, ginlimit.WithLogger(s.Logger))
	}
	if s.OnError != nil {
		opts = append(opts, ginlimit.WithErrorHandler(func(c *gin.Context, err error) bool {
			if s.OnError(err) {
				return true
			}
			c.Status(http.StatusServiceUnavailable)
			return false
		}))
	}
	if s.Cost {
		opts = append(opts, ginlimit.WithCost(func(c *gin.Context) int64 { return adaptertest.CostOf(c.GetHeader("X-Cost")) }))
	}
	if s.Skip {
		opts = append(opts, ginlimit.WithSkip(func(c *gin.Context) bool { return c.GetHeader("X-Skip") != "" }))
	}
	switch s.Panic {
	case adaptertest.KeyCallback:
		opts = append(opts, ginlimit.WithKey(func(keyfunc.Request) (string, error) { panic("boom") }))
	case adaptertest.SkipCallback:
		opts = append(opts, ginlimit.WithSkip(func(*gin.Context) bool { panic("boom") }))
	case adaptertest.CostCallback:
		opts = append(opts, ginlimit.WithCost(func(*gin.Context) int64 { panic("boom") }))
	}
	srv := &ginServer{r: gin.New()}
	if s.Router != "" {
		ginRouters[s.Router](srv.r)
	}
	srv.r.Use(ginlimit.New(s.Limiter, opts...))
	route := func(name string) gin.HandlerFunc {
		return func(c *gin.Context) {
			srv.runs.Add(1)
			srv.ran = name
			_, decided := ginlimit.DecisionFrom(c)
			c.Header(adaptertest.HeaderDecided, strconv.FormatBool(decided))
			c.String(http.StatusOK, "hello")
		}
	}
	srv.r.GET("/", route("root"))
	srv.r.GET("/login", route("login"))
	srv.r.GET("/files/:name", route("files"))
	return srv
}

func (s *ginServer) Do(t *testing.T, r adaptertest.Request) adaptertest.Response {
	return adaptertest.ServeHTTP(t, s.r, r, &s.ran)
}

func (s *ginServer) Runs() int64 { return s.runs.Load() }

// TestConformance runs the behaviour every adapter shares.
func TestConformance(t *testing.T) { adaptertest.Run(t, harness{}) }
