package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/httpapi"
	"github.com/sluicehq/sluice/service/rules"
)

// Three checks of one IP against a rule of 2 per minute: allowed, allowed,
// denied (200 with "allowed": false by default; 429 in status mode).
func Example() {
	ctx := context.Background()
	st, err := memorystore.New()
	if err != nil {
		panic(err)
	}
	defer st.Close()
	src := rules.NewBytes("rules.yaml", []byte(`
rules:
  - name: per-ip
    dimension: ip
    algorithm: sliding_window_log
    rate: 2
    period: 1m
`))
	e, err := engine.New(ctx, st, src)
	if err != nil {
		panic(err)
	}
	h := httpapi.New(e)
	for _, mode := range []string{"", "", "", "?mode=status"} {
		req := httptest.NewRequest(http.MethodPost, httpapi.Path+mode,
			strings.NewReader(`{"key_type": "ip", "key_value": "203.0.113.7"}`))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("X-RateLimit-Remaining"), strings.Contains(rec.Body.String(), `"allowed":true`))
	}
	// Output:
	// 200 1 true
	// 200 0 true
	// 200 0 false
	// 429 0 false
}
