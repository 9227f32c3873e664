package openapitest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// failures is a testing.TB that keeps what Errorf reports.
type failures struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (f *failures) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
}

func (f *failures) all() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.errs...)
}

// TestDocumentLoads: the document loads and validates as OpenAPI 3.1.
func TestDocumentLoads(t *testing.T) {
	v := New(t)
	require.True(t, v.doc.IsOpenAPI31OrLater())
	require.NotNil(t, v.doc.Paths.Find("/api/v1/rate-limit/check"))
	require.NotNil(t, v.doc.Paths.Find("/api/v1/rules/{id}"))
}

// answer is a handler answering status with content type ct and body.
func answer(status int, ct, body string, hdr ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(hdr); i += 2 {
			w.Header().Set(hdr[i], hdr[i+1])
		}
		if ct != "" {
			w.Header().Set("Content-Type", ct)
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	})
}

const (
	checkOK  = `{"allowed":true,"limit":5,"remaining":4,"reset_at":"2026-01-01T00:00:00Z","retry_after":0,"rule":"r","state":"normal"}`
	problem  = `{"type":"about:blank","title":"Bad Request","status":400,"detail":"limit: bad","instance":"/api/v1/rules","errors":[{"field":"limit","message":"bad"}]}`
	checkBad = `{"type":"about:blank","title":"invalid request","status":400,"detail":"key_type: required","field":"key_type","errors":[{"field":"key_type","message":"required"}]}`
	jsonCT   = "application/json"
	pjson    = "application/problem+json"
)

// TestValidatorCatches: an exchange the document does not describe fails
// the test, through a handler and through a transport alike; the ones it
// describes pass.
func TestValidatorCatches(t *testing.T) {
	v := New(t)
	valid := `{"key_type":"user","key_value":"alice"}`
	for _, c := range []struct {
		name, method, path, body string
		hdr                      []string
		h                        http.Handler
		fails                    bool
	}{
		{"a check answered", "POST", "/api/v1/rate-limit/check", valid, nil, answer(200, jsonCT, checkOK), false},
		{"a bad check refused", "POST", "/api/v1/rate-limit/check", `{"key_value":"a"}`, nil, answer(400, pjson, checkBad), false},
		{"a bad check admitted", "POST", "/api/v1/rate-limit/check", `{"key_value":"a"}`, nil, answer(200, jsonCT, checkOK), true},
		{"an unknown member admitted", "POST", "/api/v1/rate-limit/check", `{"key_type":"u","key_value":"a","x":1}`, nil, answer(200, jsonCT, checkOK), true},
		{"a negative cost admitted", "GET", "/api/v1/rate-limit/check?key_type=u&key_value=a&request_count=-1", "", nil, answer(200, jsonCT, checkOK), true},
		{"an ignored body of a proxied check", "POST", "/api/v1/rate-limit/check?key_type=u&key_value=a", `{"x":1}`, nil, answer(200, jsonCT, checkOK), false},
		// OpenAPI 3.1's JSON Schema 2020-12: a type array with null, and const.
		{"a null remaining (fail_open)", "POST", "/api/v1/rate-limit/check", valid, nil, answer(200, jsonCT, strings.Replace(strings.Replace(checkOK, `"remaining":4`, `"remaining":null`, 1), `"state":"normal"`, `"state":"normal","degraded":"fail_open"`, 1)), false},
		{"a string remaining", "POST", "/api/v1/rate-limit/check", valid, nil, answer(200, jsonCT, strings.Replace(checkOK, `"remaining":4`, `"remaining":"4"`, 1)), true},
		{"a problem of another type", "POST", "/api/v1/rate-limit/check", `{}`, nil, answer(400, pjson, strings.Replace(checkBad, "about:blank", "https://example.com/x", 1)), true},
		{"a status not described", "POST", "/api/v1/rate-limit/check", valid, nil, answer(418, jsonCT, checkOK), true},
		{"a 500", "POST", "/api/v1/rate-limit/check", valid, nil, answer(500, pjson, checkBad), true},
		{"a member missing", "POST", "/api/v1/rate-limit/check", valid, nil, answer(200, jsonCT, `{"allowed":true}`), true},
		{"a member too many", "POST", "/api/v1/rate-limit/check", valid, nil, answer(200, jsonCT, strings.Replace(checkOK, `"state"`, `"x":1,"state"`, 1)), true},
		{"a state unknown", "POST", "/api/v1/rate-limit/check", valid, nil, answer(200, jsonCT, strings.Replace(checkOK, "normal", "calm", 1)), true},
		{"the wrong content type", "POST", "/api/v1/rate-limit/check", valid, nil, answer(200, "text/plain", checkOK), true},
		{"a check problem with instance", "POST", "/api/v1/rate-limit/check", `{}`, nil, answer(400, pjson, problem), true},
		{"an admin problem", "GET", "/api/v1/rules?limit=0", "", []string{"Authorization", "Bearer x"}, answer(400, pjson, problem, "X-Request-Id", "r1"), false},
		{"an admin problem without X-Request-Id", "GET", "/api/v1/rules?limit=0", "", []string{"Authorization", "Bearer x"}, answer(400, pjson, problem), true},
		{"no token admitted", "GET", "/api/v1/rules", "", nil, answer(200, jsonCT, `{"rules":[],"next_cursor":""}`, "X-Request-Id", "r1"), true},
		{"a list", "GET", "/api/v1/rules", "", []string{"Authorization", "Bearer x"}, answer(200, jsonCT, `{"rules":[],"next_cursor":""}`, "X-Request-Id", "r1"), false},
		{"a rule without its ETag", "GET", "/api/v1/rules/orders", "", []string{"Authorization", "Bearer x"}, answer(404, pjson, problem, "X-Request-Id", "r1"), false},
		{"an unknown path answered", "GET", "/api/v1/nothing", "", nil, answer(200, jsonCT, `{}`), true},
		{"an unknown path refused", "GET", "/api/v1/nothing", "", nil, answer(404, pjson, problem), false},
		{"an unknown path's problem malformed", "GET", "/api/v1/nothing", "", nil, answer(404, pjson, `{"title":"x"}`), true},
		{"a method refused without Allow", "PATCH", "/api/v1/rules", "", nil, answer(405, pjson, problem), true},
		{"a method refused", "PATCH", "/api/v1/rules", "", nil, answer(405, pjson, strings.ReplaceAll(problem, "400", "405"), "Allow", "GET, POST"), false},
		{"outside the document", "GET", "/admin/", "", nil, answer(418, "text/html", "<p>"), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, via := range []string{"handler", "transport"} {
				f := &failures{TB: t}
				var srv *httptest.Server
				client := &http.Client{Timeout: 5 * time.Second}
				if via == "handler" {
					srv = httptest.NewServer(v.Handler(f, c.h))
				} else {
					srv = httptest.NewServer(c.h)
					client = v.Client(f, client)
				}
				req, err := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader(c.body))
				require.NoError(t, err)
				if c.body != "" {
					req.Header.Set("Content-Type", jsonCT)
				}
				for i := 0; i+1 < len(c.hdr); i += 2 {
					req.Header.Set(c.hdr[i], c.hdr[i+1])
				}
				res, err := client.Do(req)
				require.NoError(t, err)
				_ = res.Body.Close()
				srv.Close()
				if c.fails {
					require.NotEmpty(t, f.all(), "%s: the exchange must fail the test", via)
				} else {
					require.Empty(t, f.all(), "%s", via)
				}
			}
		})
	}
}
