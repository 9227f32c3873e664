package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/service/httpapi"
)

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
