package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice/adapters/httplimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// nopWriter is a ResponseWriter that keeps nothing but a header map, reset
// for every request.
type nopWriter struct{ h http.Header }

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *nopWriter) WriteHeader(int)             {}

// BenchmarkMiddleware measures the middleware over a bare handler, memory
// store, one client.
func BenchmarkMiddleware(b *testing.B) {
	s, _ := memorystore.New()
	defer s.Close()
	ip := keyfunc.IP()
	l, _ := core.NewLimiter(s, []core.Policy{{Name: "p", Key: ip, Limit: core.PerSecond(1_000_000_000)}})
	bare := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	for _, c := range []struct {
		name string
		h    http.Handler
	}{{"bare", bare}, {"sluice", httplimit.New(l)(bare)}} {
		b.Run(c.name, func(b *testing.B) {
			r := httptest.NewRequest(http.MethodGet, "/hello", nil)
			r.RemoteAddr = "203.0.113.7:4242"
			w := &nopWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				c.h.ServeHTTP(w, r)
			}
		})
	}
}
