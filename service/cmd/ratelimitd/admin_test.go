package main

import (
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/rulesdb"
)

// TestAdminAPIAndPageShareOneAuth: the admin API and the admin page check
// tokens through one adminauth.Auth, so they agree on a token at every
// moment: a token the page has just checked is in the one cache, and a
// revocation then reaches the API and the page at the same instant (the
// cache's end), never the API first and the page seconds later.
func TestAdminAPIAndPageShareOneAuth(t *testing.T) {
	t.Parallel()
	ctx := dbctx(t)
	dsn := "file:" + filepath.Join(t.TempDir(), "rules.db")
	db, err := rulesdb.Open(ctx, dsn)
	require.NoError(t, err)
	defer db.Close()
	secret, _, err := db.CreateToken(ctx, "test", "ops", rulesdb.ScopeRead)
	require.NoError(t, err)
	p := startServer(t, nil, "--db", dsn)

	// The page checks the token at sign-in (and caches it).
	c := pageClient(t)
	resp, _ := page(t, c, "POST", p.URL("/admin/login"), url.Values{"token": {secret}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/admin/", resp.Header.Get("Location"))

	// Revoked in the database: the API, never asked about this token
	// before, still takes it from the cache the page filled.
	require.NoError(t, db.RevokeToken(ctx, "test", "ops"))
	r := adminCall(t, apiClient(t, &http.Client{Timeout: 5 * time.Second}), p, secret, "GET", "/api/v1/rules", "")
	require.Equal(t, http.StatusOK, r.status, "one cache: the API sees the page's check; %s", r.raw)
	resp, body := page(t, c, "GET", p.URL("/admin/"), nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.True(t, strings.Contains(body, "ops"), "signed in as ops")
}
