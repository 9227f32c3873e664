package echolimit_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/echolimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// A login limit keyed by the form's username is one line: KeyFunc (over Context) reaches
// the echo.Context from the key function. The handler still reads the form.
func TestKeyByFormUsername(t *testing.T) {
	store, err := memorystore.New()
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	username := echolimit.KeyFunc(func(c echo.Context) (string, error) { return c.FormValue("username"), nil })
	l, err := core.NewLimiter(store, []core.Policy{{Name: "login", Key: username, Limit: core.PerMinute(2)}})
	require.NoError(t, err)
	e := echo.New()
	e.POST("/login", func(c echo.Context) error { return c.String(http.StatusOK, "hi "+c.FormValue("username")) }, echolimit.New(l))
	login := func(user string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(url.Values{"username": {user}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		w := httptest.NewRecorder()
		e.ServeHTTP(w, req)
		return w
	}
	for range 2 {
		w := login("alice")
		require.Equal(t, http.StatusOK, w.Code)
		require.Equal(t, "hi alice", w.Body.String())
	}
	require.Equal(t, http.StatusTooManyRequests, login("alice").Code, "alice's third attempt")
	require.Equal(t, http.StatusOK, login("bob").Code, "bob has a bucket of his own")

	ec := e.NewContext(httptest.NewRequest(http.MethodGet, "/", nil), httptest.NewRecorder())
	c, ok := echolimit.Context(echolimit.Request(ec))
	require.True(t, ok)
	require.Equal(t, ec, c)
	_, ok = echolimit.Context(&keyfunc.Static{})
	_, err = username(&keyfunc.Static{})
	require.Error(t, err, "a request of another adapter")
	require.False(t, ok, "not an Echo request")
}
