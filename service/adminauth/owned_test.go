package adminauth_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/adminauth"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// ownedServer serves h behind adminauth on a fresh database of dsn and
// returns its URL and a write token.
func ownedServer(t *testing.T, dsn string, h http.Handler) (url, token string) {
	t.Helper()
	ctx := tctx(t)
	db, err := rulesdb.Open(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	token, _, err = db.CreateToken(ctx, "test", "deployer", rulesdb.ScopeWrite)
	require.NoError(t, err)
	st, err := memorystore.New()
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	a, err := adminauth.New(db, st, adminauth.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	srv := httptest.NewServer(a.Wrap(h))
	t.Cleanup(srv.Close)
	return srv.URL, token
}

// The request that owns a key: a handler that panics releases it (the
// retry runs), one that writes nothing is stored as a 200 with its
// headers, and the key names the query too.
func TestIdempotencyOwnedRequest(t *testing.T) { each(t, testIdempotencyOwnedRequest) }

func testIdempotencyOwnedRequest(t *testing.T, dsn string) {
	var calls, panics atomic.Int64
	panics.Store(1)
	url, token := ownedServer(t, dsn, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if panics.Add(-1) >= 0 {
			panic(http.ErrAbortHandler) // net/http drops the connection, quietly
		}
		w.Header().Set("X-Seen", r.URL.RawQuery)
		w.Header().Add("X-Two", "a")
		w.Header().Add("X-Two", "b")
	}))
	post := func(path, key string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(tctx(t), "POST", url+path, strings.NewReader("body"))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Idempotency-Key", key)
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		return res, err
	}
	_, err := post("/x?dimension=user", "k")
	require.Error(t, err, "the handler panicked: no response")
	res, err := post("/x?dimension=user", "k")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode, "the key was released: the retry ran, and wrote nothing")
	require.Empty(t, res.Header.Get("Idempotent-Replayed"))
	require.Equal(t, "dimension=user", res.Header.Get("X-Seen"))
	require.Equal(t, []string{"a", "b"}, res.Header.Values("X-Two"))

	res, err = post("/x?dimension=user", "k")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "true", res.Header.Get("Idempotent-Replayed"))
	require.Equal(t, "dimension=user", res.Header.Get("X-Seen"))
	require.Equal(t, "a, b", res.Header.Get("X-Two"), "stored joined")
	require.EqualValues(t, 2, calls.Load())

	res, err = post("/x?dimension=ip", "k")
	require.NoError(t, err)
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode, "another query is another request")
	require.EqualValues(t, 2, calls.Load())
}
