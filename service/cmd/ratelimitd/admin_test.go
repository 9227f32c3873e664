package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// TestAdminAPIAndPageShareOneAuth: the admin API and the admin page check
// tokens through one adminauth.Auth, so they agree on a token at every
// moment: a token the page has just checked is in the one cache, and a
// revocation then reaches the API and the page at the same instant (the
// cache's end), never the API first and the page seconds later.
func TestAdminAPIAndPageShareOneAuth(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	src, err := rulesdb.OpenSource(ctx, "file:"+filepath.Join(t.TempDir(), "rules.db"), time.Second)
	require.NoError(t, err)
	defer src.DB().Close()
	secret, _, err := src.DB().CreateToken(ctx, "test", "ops", rulesdb.ScopeRead)
	require.NoError(t, err)
	store, err := memorystore.New()
	require.NoError(t, err)
	e, err := engine.New(ctx, store, src)
	require.NoError(t, err)
	log := slog.New(slog.DiscardHandler)

	mux := http.NewServeMux()
	newAdmin(src, store, e, engine.NewRecent(time.Minute, 10), log).mount(func(pattern, _ string, h http.Handler) { mux.Handle(pattern, h) })
	srv := httptest.NewServer(mux)
	defer srv.Close()

	// The page checks the token at sign-in (and caches it).
	c := pageClient(t)
	resp, _ := page(t, c, "POST", srv.URL+"/admin/login", url.Values{"token": {secret}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/admin/", resp.Header.Get("Location"))

	// Revoked in the database: the API, never asked about this token
	// before, still takes it from the cache the page filled.
	require.NoError(t, src.DB().RevokeToken(ctx, "test", "ops"))
	req, err := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/v1/rules", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+secret)
	r, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	require.Equal(t, http.StatusOK, r.StatusCode, "one cache: the API sees the page's check; %s", b)
	resp, body := page(t, c, "GET", srv.URL+"/admin/", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.True(t, strings.Contains(body, "ops"), "signed in as ops")
}
