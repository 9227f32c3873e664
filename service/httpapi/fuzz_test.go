package httpapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/service/httpapi"
	"github.com/sluicehq/sluice/service/internal/nginxuri"
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

// FuzzOriginalURI: any X-Original-URI of a proxied check is answered below
// 500 with JSON, and is refused (400 naming X-Original-URI) exactly when
// nginx would refuse the target, never decided on as written.
func FuzzOriginalURI(f *testing.F) {
	h := httpapi.New(memoryEngine(f))
	for _, s := range []string{"/api/v1/orders", "/api/v1/orders#x", "//api/../api/v1/orders", "/%2e%2e/x", "/a%00", "?x", "http://h/"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, uri string, unmerged bool) {
		query := "mode=status&key_type=user&key_value=fuzz"
		if unmerged {
			query += "&merge_slashes=off"
		}
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.URL.RawQuery = query
		req.Header.Set("X-Original-URI", uri)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 || !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("X-Original-URI %q: %d %s", uri, rec.Code, rec.Body)
		}
		_, err := nginxuri.Path(uri, !unmerged)
		refused := rec.Code == http.StatusBadRequest && strings.Contains(rec.Body.String(), `"field":"X-Original-URI"`)
		if (err != nil) != refused {
			t.Fatalf("X-Original-URI %q: nginxuri says %v, the handler answered %d %s", uri, err, rec.Code, rec.Body)
		}
	})
}
