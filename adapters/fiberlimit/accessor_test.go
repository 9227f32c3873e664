package fiberlimit_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/adapters/fiberlimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// A login limit keyed by the form's username is one line: KeyFunc (over Context) reaches
// the *fiber.Ctx from the key function. The handler still reads the form.
func TestKeyByFormUsername(t *testing.T) {
	store, err := memorystore.New()
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	username := fiberlimit.KeyFunc(func(c *fiber.Ctx) (string, error) { return c.FormValue("username"), nil })
	l, err := core.NewLimiter(store, []core.Policy{{Name: "login", Key: username, Limit: core.PerMinute(2)}})
	require.NoError(t, err)
	app := fiber.New()
	app.Post("/login", fiberlimit.New(l), func(c *fiber.Ctx) error { return c.SendString("hi " + c.FormValue("username")) })
	login := func(user string) (int, string) {
		req := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(url.Values{"username": {user}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		res, err := app.Test(req, 5000)
		require.NoError(t, err)
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, string(body)
	}
	for range 2 {
		code, body := login("alice")
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "hi alice", body)
	}
	code, _ := login("alice")
	require.Equal(t, http.StatusTooManyRequests, code, "alice's third attempt")
	code, _ = login("bob")
	require.Equal(t, http.StatusOK, code, "bob has a bucket of his own")

	fc := app.AcquireCtx(&fasthttp.RequestCtx{})
	defer app.ReleaseCtx(fc)
	c, ok := fiberlimit.Context(fiberlimit.Request(fc))
	require.True(t, ok)
	require.Same(t, fc, c)
	_, ok = fiberlimit.Context(&keyfunc.Static{})
	_, err = username(&keyfunc.Static{})
	require.Error(t, err, "a request of another adapter")
	require.False(t, ok, "not a Fiber request")
}
