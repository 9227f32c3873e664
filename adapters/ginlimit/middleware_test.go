package ginlimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/ginlimit"
	"github.com/sluicehq/sluice/adapters/internal/adaptertest"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/ratelimitfields"
)

// Gin's own idioms. The behaviour every adapter shares is in the
// conformance suite (conformance_test.go).

func hello(c *gin.Context) { c.String(http.StatusOK, "hello") }

func get(h http.Handler, remote string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remote
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// Outside the middleware there is no Decision, and the default denied
// handler still aborts with the problem document.
func TestOutsideTheMiddleware(t *testing.T) {
	c, _ := gin.CreateTestContext(httptest.NewRecorder())
	_, ok := ginlimit.DecisionFrom(c)
	require.False(t, ok)

	w := httptest.NewRecorder()
	c, _ = gin.CreateTestContext(w)
	ginlimit.DeniedHandler(c)
	require.True(t, c.IsAborted())
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	require.Equal(t, ratelimitfields.ProblemContentType, w.Header().Get("Content-Type"))
	require.Contains(t, w.Body.String(), `"status":429`)
}

// A custom denied handler that wraps the default one gets its problem
// document; neither needs to call Abort.
func TestDeniedHandlerWrapsTheDefault(t *testing.T) {
	l := adaptertest.IPLimiter(t, core.PerMinute(1))
	var seen []bool
	r := gin.New()
	r.Use(ginlimit.New(l, ginlimit.WithDeniedHandler(func(c *gin.Context) {
		d, _ := ginlimit.DecisionFrom(c)
		seen = append(seen, d.Allowed)
		ginlimit.DeniedHandler(c)
	})))
	r.GET("/", hello)
	get(r, "203.0.113.7:1")
	w := get(r, "203.0.113.7:1")
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	require.Equal(t, ratelimitfields.ProblemContentType, w.Header().Get("Content-Type"))
	require.Contains(t, w.Body.String(), `"violated-policies":["per-ip"]`)
	require.Equal(t, []bool{false}, seen)
}

func TestNilLimiter(t *testing.T) {
	require.PanicsWithValue(t, "ginlimit.New: nil limiter", func() { ginlimit.New(nil) })
}
