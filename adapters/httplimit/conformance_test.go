package httplimit_test

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/adapters/httplimit"
	"github.com/sluicehq/sluice/adapters/internal/adaptertest"
	"github.com/sluicehq/sluice/keyfunc"
)

// harness runs the adapter conformance suite against httplimit in front of
// a Go ServeMux (no recovery: a panic the middleware does not contain
// fails the test).
type harness struct{}

func (harness) Routers() []string { return []string{"ServeMux"} }

type muxServer struct {
	h    http.Handler
	runs atomic.Int64
	ran  string
}

func (harness) Start(t *testing.T, s adaptertest.Setup) adaptertest.Server {
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
			return false
		}))
	}
	if s.Cost {
		opts = append(opts, httplimit.WithCost(func(r *http.Request) int64 { return adaptertest.CostOf(r.Header.Get("X-Cost")) }))
	}
	if s.Skip {
		opts = append(opts, httplimit.WithSkip(func(r *http.Request) bool { return r.Header.Get("X-Skip") != "" }))
	}
	switch s.Panic {
	case adaptertest.KeyCallback:
		opts = append(opts, httplimit.WithKey(func(keyfunc.Request) (string, error) { panic("boom") }))
	case adaptertest.SkipCallback:
		opts = append(opts, httplimit.WithSkip(func(*http.Request) bool { panic("boom") }))
	case adaptertest.CostCallback:
		opts = append(opts, httplimit.WithCost(func(*http.Request) int64 { panic("boom") }))
	}
	srv := &muxServer{}
	route := func(name string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			srv.runs.Add(1)
			_, decided := httplimit.DecisionFrom(r.Context())
			w.Header().Set(adaptertest.HeaderDecided, strconv.FormatBool(decided))
			srv.ran = name
			_, _ = w.Write([]byte("hello"))
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", route("root"))
	mux.HandleFunc("GET /login", route("login"))
	mux.HandleFunc("GET /files/{name}", route("files"))
	srv.h = httplimit.New(s.Limiter, opts...)(mux)
	return srv
}

func (s *muxServer) Do(t *testing.T, r adaptertest.Request) adaptertest.Response {
	return adaptertest.ServeHTTP(t, s.h, r, &s.ran)
}

func (s *muxServer) Runs() int64 { return s.runs.Load() }

// TestConformance runs the behaviour every adapter shares.
func TestConformance(t *testing.T) { adaptertest.Run(t, harness{}) }
