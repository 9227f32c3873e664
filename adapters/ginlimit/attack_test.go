package ginlimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/ginlimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
)

// In a gin handler with no middleware, ginlimit.Request(c) is a view the
// accessor finds c behind (Context), and a Check on it keys by
// ginlimit.KeyFunc. The suite's Accessor case covers the middleware and
// the views that are not gin's.
func TestCheckOnOwnViewInHandler(t *testing.T) {
	store, err := memorystore.New()
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	byUser := ginlimit.KeyFunc(func(c *gin.Context) (string, error) { return c.Query("user"), nil })
	l, err := core.NewLimiter(store, []core.Policy{{Name: "user", Key: byUser, Limit: core.PerMinute(1)}})
	require.NoError(t, err)
	e := gin.New()
	var own []error
	var allowed, same []bool
	e.GET("/", func(c *gin.Context) {
		got, _ := ginlimit.Context(ginlimit.Request(c))
		same = append(same, got == c)
		d, err := l.Check(c.Request.Context(), ginlimit.Request(c))
		own = append(own, err)
		allowed = append(allowed, d.Allowed)
	})
	for range 2 {
		e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/?user=a", nil))
	}
	require.Equal(t, []error{nil, nil}, own)
	require.Equal(t, []bool{true, true}, same, "the accessor finds the handler's context")
	require.Equal(t, []bool{true, false}, allowed, "on its own view the key function keys")
}
