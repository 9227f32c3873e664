package openapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/sluicehq/sluice/service/openapi"
)

// The document, as ratelimitd serves it at openapi.Path.
func Example() {
	mux := http.NewServeMux()
	mux.Handle("GET "+openapi.Path, openapi.Handler())
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, openapi.Path, nil))
	var doc struct {
		OpenAPI string                     `json:"openapi"`
		Paths   map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		panic(err)
	}
	_, check := doc.Paths["/api/v1/rate-limit/check"]
	_, rules := doc.Paths["/api/v1/rules"]
	fmt.Println(rec.Code, rec.Header().Get("Content-Type"), doc.OpenAPI, check, rules)
	// Output:
	// 200 application/json 3.1.0 true true
}
