package fiberlimit_test

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gofiber/fiber/v2"

	"github.com/sluicehq/sluice/adapters/fiberlimit"
	"github.com/sluicehq/sluice/adapters/internal/adaptertest"
	"github.com/sluicehq/sluice/keyfunc"
)

// harness runs the adapter conformance suite against fiberlimit. fasthttp
// does not recover handlers: a panic the middleware does not contain takes
// the test process down.
type harness struct{}

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
	app  *fiber.App
	runs atomic.Int64
	mu   sync.Mutex
	ran  string
}

func (harness) Start(t *testing.T, s adaptertest.Setup) adaptertest.Server {
	var opts []fiberlimit.Option
	if s.Logger != nil {
		opts = append(opts, fiberlimit.WithLogger(s.Logger))
	}
	if s.OnError != nil {
		opts = append(opts, fiberlimit.WithErrorHandler(func(c *fiber.Ctx, err error) (bool, error) {
			return s.OnError(err), fiber.ErrServiceUnavailable
		}))
	}
	if s.Cost {
		opts = append(opts, fiberlimit.WithCost(func(c *fiber.Ctx) int64 { return adaptertest.CostOf(c.Get("X-Cost")) }))
	}
	if s.Skip {
		opts = append(opts, fiberlimit.WithSkip(func(c *fiber.Ctx) bool { return c.Get("X-Skip") != "" }))
	}
	switch s.Panic {
	case adaptertest.KeyCallback:
		opts = append(opts, fiberlimit.WithKey(func(keyfunc.Request) (string, error) { panic("boom") }))
	case adaptertest.SkipCallback:
		opts = append(opts, fiberlimit.WithSkip(func(*fiber.Ctx) bool { panic("boom") }))
	case adaptertest.CostCallback:
		opts = append(opts, fiberlimit.WithCost(func(*fiber.Ctx) int64 { panic("boom") }))
	}
	srv := &fiberServer{app: fiber.New(fiberRouters[s.Router])}
	// A gone client: an app that ties UserContext to the connection sees
	// it cancelled.
	srv.app.Use(func(c *fiber.Ctx) error {
		if c.Get("X-Gone") != "" {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			c.SetUserContext(ctx)
		}
		return c.Next()
	})
	srv.app.Use(fiberlimit.New(s.Limiter, opts...))
	route := func(name string) fiber.Handler {
		return func(c *fiber.Ctx) error {
			srv.runs.Add(1)
			_, decided := fiberlimit.DecisionFrom(c)
			c.Set(adaptertest.HeaderDecided, strconv.FormatBool(decided))
			srv.mu.Lock()
			srv.ran = name
			srv.mu.Unlock()
			return c.SendString("hello")
		}
	}
	srv.app.Get("/", route("root"))
	srv.app.Get("/login", route("login"))
	srv.app.Get("/files/:name", route("files"))
	return srv
}

func (s *fiberServer) Do(t *testing.T, r adaptertest.Request) adaptertest.Response {
	if r.Path == "" {
		r.Path = "/"
	}
	var hdr []string
	if r.Gone {
		hdr = []string{"X-Gone", "1"}
	}
	for k, vs := range r.Header {
		for _, v := range vs {
			hdr = append(hdr, k, v)
		}
	}
	s.mu.Lock()
	s.ran = ""
	s.mu.Unlock()
	res := get(t, s.app, r.Path, hdr...)
	s.mu.Lock()
	defer s.mu.Unlock()
	return adaptertest.Response{Status: res.status, Header: http.Header(res.header), Body: res.body, Ran: s.ran}
}

func (s *fiberServer) Runs() int64 { return s.runs.Load() }

// TestConformance runs the behaviour every adapter shares.
func TestConformance(t *testing.T) {
	t.Parallel()
	adaptertest.Run(t, harness{})
}
