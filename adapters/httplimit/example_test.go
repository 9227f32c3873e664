package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/sluicehq/sluice/adapters/httplimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// One line puts a handler behind a limit of 2 requests per minute per client
// IP; the third request gets 429 with Retry-After.
func ExampleNew() {
	store, _ := memorystore.New()
	defer store.Close()
	clientIP := keyfunc.IP()
	limiter, _ := core.NewLimiter(store, []core.Policy{{Name: "per-ip", Key: clientIP, Limit: core.PerMinute(2)}})

	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") })
	h := httplimit.New(limiter)(hello)

	for range 3 {
		r := httptest.NewRequest(http.MethodGet, "/hello", nil)
		r.RemoteAddr = "203.0.113.7:4242"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%d %s retry-after=%q\n", w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))
	}
	// Output:
	// 200 "per-ip";r=1;t=30 retry-after=""
	// 200 "per-ip";r=0;t=30 retry-after=""
	// 429 "per-ip";r=0;t=30 retry-after="30"
}
