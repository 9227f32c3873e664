package fiberlimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/fiberlimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
)

// In a Fiber handler with no middleware, fiberlimit.Request(c) is a view
// the accessor finds c behind (Context), and a Check on it keys by
// fiberlimit.KeyFunc. The suite's Accessor case covers the middleware and
// the views that are not Fiber's.
func TestCheckOnOwnViewInHandler(t *testing.T) {
	store, err := memorystore.New()
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	byUser := fiberlimit.KeyFunc(func(c *fiber.Ctx) (string, error) { return c.Query("user"), nil })
	l, err := core.NewLimiter(store, []core.Policy{{Name: "user", Key: byUser, Limit: core.PerMinute(1)}})
	require.NoError(t, err)
	app := fiber.New()
	var own []error
	var allowed, same []bool
	app.Get("/", func(c *fiber.Ctx) error {
		got, _ := fiberlimit.Context(fiberlimit.Request(c))
		same = append(same, got == c)
		d, err := l.Check(c.UserContext(), fiberlimit.Request(c))
		own = append(own, err)
		allowed = append(allowed, d.Allowed)
		return nil
	})
	for range 2 {
		res, err := app.Test(httptest.NewRequest(http.MethodGet, "/?user=a", nil), 5000)
		require.NoError(t, err)
		require.NoError(t, res.Body.Close())
	}
	require.Equal(t, []error{nil, nil}, own)
	require.Equal(t, []bool{true, true}, same, "the accessor finds the handler's context")
	require.Equal(t, []bool{true, false}, allowed, "on its own view the key function keys")
}
