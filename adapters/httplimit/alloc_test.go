package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/httplimit"
	"github.com/sluicehq/sluice/adapters/internal/adaptertest"
	"github.com/sluicehq/sluice/core"
)

// The one allocation of an allowed request (its view and Scratch) stays in
// the allocator's 1024-byte class: a field more in the request's state or
// its Decision that crosses it costs every request 128 bytes.
func TestMiddlewareAllocationFitsItsClass(t *testing.T) {
	l := adaptertest.IPLimiter(t, core.Per(1_000_000_000, time.Second))
	h := httplimit.New(l)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "203.0.113.7:4242"
	w := &nopWriter{h: http.Header{}}
	serve := func() { clear(w.h); h.ServeHTTP(w, r) }
	serve()
	const n = 2000
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		serve()
	}
	runtime.ReadMemStats(&after)
	require.LessOrEqual(t, (after.TotalAlloc-before.TotalAlloc)/n, uint64(1100), "bytes per request")
	require.Len(t, w.h, 6)
}
