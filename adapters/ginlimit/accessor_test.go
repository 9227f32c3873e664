package ginlimit_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/ginlimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// A login limit keyed by the form's username is one line: KeyFunc (over Context) reaches
// the *gin.Context from the key function. The handler still reads the form.
func TestKeyByFormUsername(t *testing.T) {
	store, err := memorystore.New()
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	username := ginlimit.KeyFunc(func(c *gin.Context) (string, error) { return c.PostForm("username"), nil })
	l, err := core.NewLimiter(store, []core.Policy{{Name: "login", Key: username, Limit: core.PerMinute(2)}})
	require.NoError(t, err)
	e := gin.New()
	e.POST("/login", ginlimit.New(l), func(c *gin.Context) { c.String(http.StatusOK, "hi "+c.PostForm("username")) })
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

	c, ok := ginlimit.Context(ginlimit.Request(gin.CreateTestContextOnly(httptest.NewRecorder(), e)))
	require.True(t, ok)
	require.NotNil(t, c)
	_, ok = ginlimit.Context(&keyfunc.Static{})
	_, err = username(&keyfunc.Static{})
	require.Error(t, err, "a request of another adapter")
	require.False(t, ok, "not a gin request")
}
