package adminauth_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/adminauth"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// TestIdempotentRequestEndsBeforeItsKeyIsAbandoned: a key whose request is
// in flight longer than rulesdb.IdempotencyAbandoned is taken as abandoned
// (its process died) and claimed by the next request with it. The first
// request must then never write any more, or the write is made twice (a
// request stalled over a minute on the database's write lock, during a
// long import, and a client retrying the key): the handler of an
// idempotent request runs under a deadline 10 s before that, its
// transactions rolled back when it passes.
func TestIdempotentRequestEndsBeforeItsKeyIsAbandoned(t *testing.T) {
	ctx := tctx(t)
	db, err := rulesdb.Open(ctx, "file:"+filepath.Join(t.TempDir(), "rules.db"))
	require.NoError(t, err)
	defer func() { _ = db.Close() }()
	secret, _, err := db.CreateToken(ctx, "test", "deployer", rulesdb.ScopeWrite)
	require.NoError(t, err)
	st, err := memorystore.New()
	require.NoError(t, err)
	defer st.Close()
	auth, err := adminauth.New(db, st, adminauth.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	deadlines := make(chan time.Duration, 2)
	srv := httptest.NewServer(auth.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, ok := r.Context().Deadline()
		if !ok {
			deadlines <- -1
		} else {
			deadlines <- time.Until(d)
		}
		w.WriteHeader(http.StatusCreated)
	})))
	defer srv.Close()
	post := func(key string) {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL+"/x", strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+secret)
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusCreated, resp.StatusCode)
	}
	post("K")
	d := <-deadlines
	require.Positive(t, d, "an idempotent request's handler has a deadline")
	require.LessOrEqual(t, d, rulesdb.IdempotencyAbandoned-10*time.Second)
	post("")
	require.Equal(t, time.Duration(-1), <-deadlines, "a request without a key is not bounded here")
}
