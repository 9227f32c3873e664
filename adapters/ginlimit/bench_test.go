package ginlimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/adapters/ginlimit"
	"github.com/sluicehq/sluice/adapters/internal/adaptertest"
	"github.com/sluicehq/sluice/core"
)

// discard is a ResponseWriter that keeps nothing, so the benchmark measures
// the middleware rather than a recorder.
type discard http.Header

func (w discard) Header() http.Header       { return http.Header(w) }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}

// BenchmarkMiddleware is the cost of one allowed request through the
// middleware (memory store, one key) against the same engine without it; the
// overhead is the difference.
func BenchmarkMiddleware(b *testing.B) {
	l := adaptertest.IPLimiter(b, core.Per(1_000_000_000, time.Second))
	ok := func(c *gin.Context) { c.Status(http.StatusNoContent) }
	bare := gin.New()
	bare.GET("/", ok)
	limited := gin.New()
	limited.Use(ginlimit.New(l))
	limited.GET("/", ok)

	for _, bc := range []struct {
		name string
		h    http.Handler
	}{{"bare", bare}, {"limited", limited}} {
		b.Run(bc.name, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			req.RemoteAddr = "203.0.113.7:4000"
			w := discard{}
			b.ReportAllocs()
			for b.Loop() {
				clear(w)
				bc.h.ServeHTTP(w, req)
			}
		})
	}
}
