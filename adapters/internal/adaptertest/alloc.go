package adaptertest

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// Allocations is implemented by an HTTP harness that bounds the
// allocations its middleware adds to an allowed request (RunAllocations).
type Allocations interface {
	// Serve returns a function that serves one GET "/" from 203.0.113.7
	// with the header X-API-Key through the framework to a handler that
	// answers 204, into a writer that keeps nothing, behind the middleware
	// of l (nil: none, the bare framework).
	Serve(t *testing.T, l *core.Limiter) func()
	// MaxAllocs is the most allocations the middleware adds to an allowed
	// request keyed by IP and to one keyed by the header X-API-Key (with
	// what the race detector adds).
	MaxAllocs() (byIP, byHeader float64)
}

// RunAllocations asserts that an allowed request keyed by IP or by a
// header costs a's middleware no more allocations over the bare framework
// than MaxAllocs says. It is not part of Run: testing.AllocsPerRun panics
// in a parallel test, and Run may be one.
func RunAllocations(t *testing.T, a Allocations) {
	limit := core.Per(1_000_000_000, time.Second)
	bare := LeastAllocs(a.Serve(t, nil))
	byIP := LeastAllocs(a.Serve(t, limiter(t, memStore(t), keyfunc.IP(), limit)))
	byKey := LeastAllocs(a.Serve(t, limiter(t, memStore(t), keyfunc.Header("X-API-Key"), limit)))
	maxIP, maxKey := a.MaxAllocs()
	require.LessOrEqual(t, byIP-bare, maxIP, "bare %v, by IP %v", bare, byIP)
	require.LessOrEqual(t, byKey-bare, maxKey, "bare %v, by key %v", bare, byKey)
}

// ServeFunc is an HTTP harness's Allocations.Serve for h, the framework
// with its middleware and route: it serves h the request Serve describes
// into a writer that keeps nothing but its header map, cleared each time.
func ServeFunc(h http.Handler) func() {
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.RemoteAddr = "203.0.113.7:4000"
	req.Header.Set("X-API-Key", "k-0123456789")
	w := discard{}
	return func() {
		clear(w)
		h.ServeHTTP(w, req)
	}
}

// discard is a ResponseWriter that keeps nothing but its header map.
type discard http.Header

func (w discard) Header() http.Header       { return http.Header(w) }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}

// LeastAllocs is the fewest allocations f makes in a run, over five
// measurements: testing.AllocsPerRun counts every goroutine's allocations,
// and one that another test left running (a breaker probing a stopped
// Redis, say) only ever adds to them.
func LeastAllocs(f func()) float64 {
	least := testing.AllocsPerRun(100, f)
	for range 4 {
		time.Sleep(time.Millisecond)
		least = min(least, testing.AllocsPerRun(100, f))
	}
	return least
}
