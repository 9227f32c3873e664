package fiberlimit_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/fiberlimit"
	"github.com/sluicehq/sluice/adapters/httplimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// A careless operator's key function: fiberlimit.KeyFunc (over Context) in
// a net/http middleware, or in a Check from a Fiber handler on another
// view, finds no *fiber.Ctx: ok false and a key error, never a panic; the
// request is undecided (logged) and proceeds, as for any key error of the
// only policy. On its own view it keys.
func TestAttackContextOnForeignViews(t *testing.T) {
	store, err := memorystore.New()
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	byUser := fiberlimit.KeyFunc(func(c *fiber.Ctx) (string, error) { return c.Query("user"), nil })
	l, err := core.NewLimiter(store, []core.Policy{{Name: "user", Key: byUser, Limit: core.PerMinute(1)}})
	require.NoError(t, err)

	for _, r := range []keyfunc.Request{nil, &keyfunc.Static{}, httplimit.Request(httptest.NewRequest(http.MethodGet, "/?user=a", nil))} {
		c, ok := fiberlimit.Context(r)
		require.False(t, ok)
		require.Nil(t, c)
		if r != nil {
			_, err := byUser(r)
			require.ErrorContains(t, err, "not a request of the fiberlimit middleware")
		}
	}

	var logs bytes.Buffer
	h := httplimit.New(l, httplimit.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for range 3 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/?user=a", nil))
		require.Equal(t, http.StatusOK, w.Code, "undecided: proceeds")
	}
	require.Contains(t, logs.String(), "not a request of the fiberlimit middleware")

	app := fiber.New()
	var foreign, own []error
	var allowed []bool
	app.Get("/", func(c *fiber.Ctx) error {
		_, err := l.Check(context.Background(), &keyfunc.Static{})
		foreign = append(foreign, err)
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
	require.Len(t, foreign, 2)
	for i := range foreign {
		require.ErrorContains(t, foreign[i], `policy "user": key: fiberlimit: KeyFunc: not a request of the fiberlimit middleware`)
		require.NoError(t, own[i])
	}
	require.Equal(t, []bool{true, false}, allowed, "on its own view the key function keys")
}
