package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/httplimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// A login limit keyed by the form's username is one line: KeyFunc (over
// HTTPRequest) reaches the *http.Request from the key function. The handler still reads
// the form.
func TestKeyByFormUsername(t *testing.T) {
	store, err := memorystore.New()
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	username := httplimit.KeyFunc(func(r *http.Request) (string, error) { return r.PostFormValue("username"), nil })
	l, err := core.NewLimiter(store, []core.Policy{{Name: "login", Key: username, Limit: core.PerMinute(2)}})
	require.NoError(t, err)
	h := httplimit.New(l)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("hi " + r.PostFormValue("username")))
	}))
	login := func(user string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(url.Values{"username": {user}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	for range 2 {
		w := login("alice")
		require.Equal(t, http.StatusOK, w.Code)
		require.Equal(t, "hi alice", w.Body.String())
	}
	require.Equal(t, http.StatusTooManyRequests, login("alice").Code, "alice's third attempt")
	require.Equal(t, http.StatusOK, login("bob").Code, "bob has a bucket of his own")

	hr := httptest.NewRequest(http.MethodGet, "/", nil)
	got, ok := httplimit.HTTPRequest(httplimit.Request(hr))
	require.True(t, ok)
	require.Same(t, hr, got)
	_, ok = httplimit.HTTPRequest(&keyfunc.Static{})
	_, err = username(&keyfunc.Static{})
	require.Error(t, err, "a request of another adapter")
	require.False(t, ok, "not a net/http request")
}
