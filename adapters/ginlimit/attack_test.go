package ginlimit_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/ginlimit"
	"github.com/sluicehq/sluice/adapters/httplimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// A careless operator's key function: ginlimit.KeyFunc (over Context) in
// a net/http middleware, or in a Check from a gin handler on another
// adapter's view, finds no *gin.Context: ok false and a key error, never a
// panic; the request is undecided (logged) and proceeds, as for any key
// error of the only policy. On its own view it keys.
func TestAttackContextOnForeignViews(t *testing.T) {
	store, err := memorystore.New()
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	byUser := ginlimit.KeyFunc(func(c *gin.Context) (string, error) { return c.Query("user"), nil })
	l, err := core.NewLimiter(store, []core.Policy{{Name: "user", Key: byUser, Limit: core.PerMinute(1)}})
	require.NoError(t, err)

	for _, r := range []keyfunc.Request{nil, &keyfunc.Static{}, httplimit.Request(httptest.NewRequest(http.MethodGet, "/?user=a", nil))} {
		c, ok := ginlimit.Context(r)
		require.False(t, ok)
		require.Nil(t, c)
		if r != nil {
			_, err := byUser(r)
			require.ErrorContains(t, err, "not a request of the ginlimit middleware")
		}
	}

	var logs bytes.Buffer
	h := httplimit.New(l, httplimit.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for range 3 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/?user=a", nil))
		require.Equal(t, http.StatusOK, w.Code, "undecided: proceeds")
	}
	require.Contains(t, logs.String(), "not a request of the ginlimit middleware")

	e := gin.New()
	var foreign, own []error
	var allowed []bool
	e.GET("/", func(c *gin.Context) {
		_, err := l.Check(context.Background(), httplimit.Request(c.Request))
		foreign = append(foreign, err)
		d, err := l.Check(c.Request.Context(), ginlimit.Request(c))
		own = append(own, err)
		allowed = append(allowed, d.Allowed)
	})
	for range 2 {
		e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/?user=a", nil))
	}
	require.Len(t, foreign, 2)
	for i := range foreign {
		require.ErrorContains(t, foreign[i], `policy "user": key: ginlimit: KeyFunc: not a request of the ginlimit middleware`)
		require.NoError(t, own[i])
	}
	require.Equal(t, []bool{true, false}, allowed, "on its own view the key function keys")
}
