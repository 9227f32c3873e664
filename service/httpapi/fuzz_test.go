package httpapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/service/httpapi"
)

// FuzzCheck: any body, query and method is answered below 500 with a JSON
// body (the decision, or a problem), never a panic.
func FuzzCheck(f *testing.F) {
	e := memoryEngine(f)
	h := httpapi.New(e)
	f.Add("POST", "", `{"key_type":"ip","key_value":"1"}`)
	f.Add("POST", "mode=status", `{"key_type":"user","key_value":"a","endpoint":"/api/v1/orders","request_count":0}`)
	f.Add("GET", "mode=status&key_type=ip&key_value=1&request_count=2", "")
	f.Add("POST", "deny_status=403", `{"key_type":"ip","key_value":"1","rule_id":"per-ip","idempotency_key":"k"}`)
	f.Add("POST", "", `[{"key_type":1}]`)
	f.Fuzz(func(t *testing.T, method, query, body string) {
		if method != http.MethodGet && method != http.MethodPost && method != http.MethodPut {
			method = http.MethodPost
		}
		req := httptest.NewRequest(method, "/", strings.NewReader(body))
		req.URL.RawQuery = query
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s ?%s %q: %d %s", method, query, body, rec.Code, rec.Body)
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("%s ?%s %q: not JSON: %s", method, query, body, rec.Body)
		}
	})
}
