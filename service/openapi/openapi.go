package openapi

import (
	_ "embed"
	"net/http"
	"strconv"
)

// Path is where ratelimitd serves the document.
const Path = "/api/v1/openapi.json"

//go:embed openapi.json
var document []byte

// Document returns the OpenAPI 3.1 document as JSON: a copy, which the
// caller may change.
func Document() []byte { return append([]byte(nil), document...) }

// Handler serves the document on GET and HEAD (405 otherwise), as
// application/json. It is safe for concurrent use.
func Handler() http.Handler {
	length := strconv.Itoa(len(document))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed: use GET", http.StatusMethodNotAllowed)
			return
		}
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", length)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-cache")
		if r.Method == http.MethodHead {
			return
		}
		_, _ = w.Write(document)
	})
}
