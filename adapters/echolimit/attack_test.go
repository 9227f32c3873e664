package echolimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/echolimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
)

// In an Echo handler with no middleware, echolimit.Request(c) is a view
// the accessor finds c behind (Context), and a Check on it keys by
// echolimit.KeyFunc. The suite's Accessor case covers the middleware and
// the views that are not Echo's.
func TestCheckOnOwnViewInHandler(t *testing.T) {
	store, err := memorystore.New()
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	byUser := echolimit.KeyFunc(func(c echo.Context) (string, error) { return c.QueryParam("user"), nil })
	l, err := core.NewLimiter(store, []core.Policy{{Name: "user", Key: byUser, Limit: core.PerMinute(1)}})
	require.NoError(t, err)
	e := echo.New()
	var own []error
	var allowed, same []bool
	e.GET("/", func(c echo.Context) error {
		got, _ := echolimit.Context(echolimit.Request(c))
		same = append(same, got == c)
		d, err := l.Check(c.Request().Context(), echolimit.Request(c))
		own = append(own, err)
		allowed = append(allowed, d.Allowed)
		return nil
	})
	for range 2 {
		e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/?user=a", nil))
	}
	require.Equal(t, []error{nil, nil}, own)
	require.Equal(t, []bool{true, true}, same, "the accessor finds the handler's context")
	require.Equal(t, []bool{true, false}, allowed, "on its own view the key function keys")
}
