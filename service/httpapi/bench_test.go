package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/httpapi"
	"github.com/sluicehq/sluice/service/rules"
)

// benchStore is a memory store, closed when the benchmark ends.
func benchStore(b *testing.B) core.Store {
	b.Helper()
	st, err := memorystore.New()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	return st
}

// BenchmarkCheck: one JSON check through the handler and the engine
// (memory store), no network.
func BenchmarkCheck(b *testing.B) {
	e := memoryEngine(b)
	h := httpapi.New(e)
	bodies := make([]string, 4096)
	for i := range bodies {
		bodies[i] = `{"key_type":"user","key_value":"u` + strconv.Itoa(i) + `","endpoint":"/api/v1/orders"}`
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			req := httptest.NewRequest(http.MethodPost, httpapi.Path, strings.NewReader(bodies[i%len(bodies)]))
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				b.Errorf("%d %s", rec.Code, rec.Body)
				return
			}
			i++
		}
	})
}

// rewinder is a request body read again for each check.
type rewinder struct{ strings.Reader }

func (r *rewinder) Close() error { return nil }

// sink is a ResponseWriter that keeps the status and discards the body.
type sink struct {
	h    http.Header
	code int
}

func (s *sink) Header() http.Header         { return s.h }
func (s *sink) WriteHeader(code int)        { s.code = code }
func (s *sink) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkCheckHandler is the handler's share of one JSON check, allowed,
// over 1024 users: the request and the response writer are reused, so
// what net/http adds to each request is not counted.
func BenchmarkCheckHandler(b *testing.B) {
	e, err := engine.New(context.Background(), benchStore(b), rules.NewBytes("rules.yaml", []byte(`
rules:
  - name: per-user
    dimension: user
    endpoints: [/api/**]
    algorithm: gcra
    rate: 1000000000
    period: 1s
    burst: 1000000000
`)))
	if err != nil {
		b.Fatal(err)
	}
	h := httpapi.New(e)
	bodies := make([]string, 1024)
	for i := range bodies {
		bodies[i] = `{"key_type":"user","key_value":"u` + strconv.Itoa(i) + `","endpoint":"/api/v1/orders"}`
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		body := &rewinder{}
		req := httptest.NewRequest(http.MethodPost, httpapi.Path, body)
		req.Header.Set("Content-Type", "application/json")
		w := &sink{h: http.Header{}}
		i := 0
		for pb.Next() {
			i++
			body.Reset(bodies[i&1023])
			clear(w.h)
			h.ServeHTTP(w, req)
			if w.code != http.StatusOK {
				b.Errorf("%d", w.code)
				return
			}
		}
	})
}
