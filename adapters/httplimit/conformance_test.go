package httplimit_test

import (
	"io"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/adapters/httplimit"
	"github.com/sluicehq/sluice/adapters/internal/adaptertest"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// harness runs the adapter conformance suite against httplimit in front of
// a Go ServeMux (no recovery: a panic the middleware does not contain
// fails the test).
type harness struct{}

// GlobalRoute: the ServeMux routes after the middleware has run.
func (harness) GlobalRoute(_, path string) string { return path }

func (harness) Routers() []string { return []string{"ServeMux"} }

type muxServer struct {
	h    http.Handler
	runs atomic.Int64
}

func options(s adaptertest.Setup) []httplimit.Option {
	var opts []httplimit.Option
	if s.Logger != nil {
		opts = append(opts, httplimit.WithLogger(s.Logger))
	}
	if s.OnError != nil {
		opts = append(opts, httplimit.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) bool {
			if s.OnError(err) {
				return true
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, adaptertest.Refused)
			return false
		}))
	}
	if s.Cost {
		opts = append(opts, httplimit.WithCost(func(r *http.Request) int64 { return adaptertest.CostOf(r.Header.Get("X-Cost")) }))
	}
	if s.Skip {
		opts = append(opts, httplimit.WithSkip(func(r *http.Request) bool { return r.Header.Get("X-Skip") != "" }))
	}
	if s.Key != nil {
		opts = append(opts, httplimit.WithKey(s.Key))
	}
	if s.Headers != nil {
		opts = append(opts, httplimit.WithHeaders(*s.Headers))
	}
	if s.Denied {
		opts = append(opts, httplimit.WithDeniedHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			d, ok := httplimit.DecisionFrom(r.Context())
			body := adaptertest.DeniedBody(d, ok, w.Header().Get("Retry-After"))
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, body)
		})))
	}
	switch s.Panic {
	case adaptertest.KeyCallback:
		opts = append(opts, httplimit.WithKey(func(keyfunc.Request) (string, error) { panic("boom") }))
	case adaptertest.SkipCallback:
		opts = append(opts, httplimit.WithSkip(func(*http.Request) bool { panic("boom") }))
	case adaptertest.CostCallback:
		opts = append(opts, httplimit.WithCost(func(*http.Request) int64 { panic("boom") }))
	}
	return opts
}

func (harness) Start(t *testing.T, s adaptertest.Setup) adaptertest.Server {
	opts := options(s)
	srv := &muxServer{}
	route := func(name string) http.Handler {
		var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			srv.runs.Add(1)
			d, ok := httplimit.DecisionFrom(r.Context())
			w.Header().Set(adaptertest.HeaderRoute, name)
			w.Header().Set(adaptertest.HeaderForm, r.PostFormValue("username"))
			if s.InHandler != nil {
				s.InHandler(httplimit.Request(r), r)
			}
			w.Header().Set(adaptertest.HeaderDecision, adaptertest.Describe(d, ok))
			w.WriteHeader(adaptertest.StatusOf(r.Header.Get(adaptertest.HeaderStatus)))
			_, _ = w.Write([]byte("hello"))
		})
		if rl, ok := s.Routes[name]; ok {
			ropts := slices.Clip(opts)
			if rl.Key != nil {
				ropts = append(ropts, httplimit.WithKey(rl.Key))
			}
			h = httplimit.New(rl.Limiter, ropts...)(h)
		}
		return h
	}
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", route("root"))
	mux.Handle("GET /login", route("login"))
	mux.Handle("POST /login", route("login"))
	mux.Handle("GET /files/{name}", route("files"))
	srv.h = mux
	if s.Limiter != nil {
		srv.h = httplimit.New(s.Limiter, opts...)(mux)
	}
	return srv
}

// Package, FormKey and Access: httplimit.KeyFunc over httplimit.HTTPRequest.
func (harness) Package() string { return "httplimit" }

func (harness) FormKey(field string) keyfunc.Func {
	return httplimit.KeyFunc(func(r *http.Request) (string, error) { return r.PostFormValue(field), nil })
}

func (harness) Access(r keyfunc.Request) (bool, any) {
	v, ok := httplimit.HTTPRequest(r)
	if v == nil {
		return ok, nil
	}
	return ok, v
}

// Serve and MaxAllocs: an allowed request costs the middleware one
// allocation (its view and Scratch); keyed by a header, a second: the
// canonical form of its name.
func (harness) Serve(_ *testing.T, l *core.Limiter) func() {
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	if l != nil {
		h = httplimit.New(l)(h)
	}
	return adaptertest.ServeFunc(h)
}

func (harness) MaxAllocs() (byIP, byHeader float64) { return 1 + raceAllocs, 2 + raceAllocs }

func (s *muxServer) Do(t *testing.T, r adaptertest.Request) adaptertest.Response {
	return adaptertest.ServeHTTP(t, s.h, r)
}

func (s *muxServer) Runs() int64 { return s.runs.Load() }

// TestConformance runs the behaviour every adapter shares.
func TestConformance(t *testing.T) { adaptertest.Run(t, harness{}) }

// TestMiddlewareAllocations bounds what the middleware allocates for an
// allowed request (MaxAllocs).
func TestMiddlewareAllocations(t *testing.T) { adaptertest.RunAllocations(t, harness{}) }
