package problem_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/internal/problem"
)

func TestWrite(t *testing.T) {
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		t.Run(method, func(t *testing.T) {
			r := httptest.NewRequest(method, "/api/v1/rules/x", nil)
			w := httptest.NewRecorder()
			w.Header().Set("Cache-Control", "no-store")
			problem.Write(w, r, http.StatusBadRequest, problem.New(r, http.StatusBadRequest, "Bad Request", "limit: too big",
				core.FieldError{Field: "limit", Message: "too big"}))
			require.Equal(t, http.StatusBadRequest, w.Code)
			require.Equal(t, "application/problem+json", w.Header().Get("Content-Type"))
			require.Equal(t, "nosniff", w.Header().Get("X-Content-Type-Options"))
			require.Equal(t, "no-store", w.Header().Get("Cache-Control"))
			if method == http.MethodHead {
				require.Empty(t, w.Body.Bytes())
				return
			}
			require.JSONEq(t, `{"type":"about:blank","title":"Bad Request","status":400,"detail":"limit: too big",
				"instance":"/api/v1/rules/x","errors":[{"field":"limit","message":"too big"}]}`, w.Body.String())
			var d problem.Details
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &d))
			require.Equal(t, "limit", d.Errors[0].Field)
		})
	}
}

func ExampleWrite() {
	r := httptest.NewRequest(http.MethodGet, "/api/v1/audit?limit=0", nil)
	w := httptest.NewRecorder()
	problem.Write(w, r, http.StatusBadRequest, problem.New(r, http.StatusBadRequest, "Bad Request",
		"limit: must be an integer from 1 to 1000", core.FieldError{Field: "limit", Message: "must be an integer from 1 to 1000"}))
	fmt.Println(w.Header().Get("Content-Type"))
	fmt.Print(w.Body.String())
	// Output:
	// application/problem+json
	// {"type":"about:blank","title":"Bad Request","status":400,"detail":"limit: must be an integer from 1 to 1000","instance":"/api/v1/audit","errors":[{"field":"limit","message":"must be an integer from 1 to 1000"}]}
}
