package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/internal/pgtest"
	"github.com/sluicehq/sluice/service/internal/ratelimitdtest"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// checkHTTP asks p's HTTP check API for one request of user id on
// /api/orders/1 and returns the answer's limit and whether it was allowed.
func checkHTTP(t *testing.T, c *http.Client, p instance, id string) (limit int64, allowed bool) {
	t.Helper()
	body := `{"key_type": "user", "key_value": "` + id + `", "endpoint": "/api/orders/1"}`
	resp, err := c.Post(p.URL("/api/v1/rate-limit/check"), "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	var out struct {
		Allowed bool  `json:"allowed"`
		Limit   int64 `json:"limit"`
	}
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return out.Limit, out.Allowed
}

func ordersRule(limit int64) rulesdb.Rule {
	return rulesdb.Rule{ID: "orders", Name: "orders", Dimension: "user", EndpointPattern: "/api/orders/**",
		Limit: limit, WindowSeconds: 3600, Algorithm: "fixed_window", Enabled: true}
}

func dbctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// withPassword adds a password to a pgtest DSN (the test server trusts
// loopback, so it is not checked): the logs must never show it.
func withPassword(t *testing.T, dsn string) string {
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	u.User = url.UserPassword(u.User.Username(), "s3cret-pw")
	return u.String()
}

// Two `ratelimitd serve --db postgres://…` processes: a rule changed
// through the database API is in force on the other within 1 s, checked
// through the HTTP check API (50 changes; the figures are logged).
func TestServeDBPostgresTwoInstances(t *testing.T) {
	// Not parallel: it holds the service to a bound in time, measured
	// with no other test of the package running.
	ctx := dbctx(t)
	dsn := withPassword(t, pg.NewDatabase(t))
	admin, err := rulesdb.Open(ctx, dsn)
	require.NoError(t, err)
	defer admin.Close()
	r, err := admin.Create(ctx, "alice", ordersRule(100))
	require.NoError(t, err)

	a := startServer(t, nil, "--db", dsn, "--db-poll", "30s")
	b := startServer(t, map[string]string{"RATELIMITD_DB": dsn, "RATELIMITD_DB_POLL": "30s"})
	c := apiClient(t, &http.Client{Timeout: 5 * time.Second})
	for _, p := range []*ratelimitdtest.Daemon{a, b} {
		_, ready := readyz(t, p)
		require.Equal(t, "1", ready.Revision)
		require.False(t, ready.Cached)
		limit, ok := checkHTTP(t, c, p, "warmup")
		require.True(t, ok)
		require.EqualValues(t, 100, limit)
	}

	const changes = 50
	took := make([]time.Duration, 0, changes)
	for i := range changes {
		next := ordersRule(int64(200 + i))
		start := time.Now()
		r, err = admin.Update(ctx, "alice", next, r.ETag)
		require.NoError(t, err)
		for n := 0; ; n++ {
			limit, _ := checkHTTP(t, c, b, "u"+strconv.Itoa(i)+"-"+strconv.Itoa(n))
			if limit == next.Limit {
				break
			}
			require.Less(t, time.Since(start), time.Second, "change %d not in force on the other instance within 1s", i)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	t.Logf("propagation over %d changes, two ratelimitd processes on PostgreSQL (DB commit to the first HTTP check decided under the new limit, --db-poll 30s): p50 %v, p90 %v, max %v",
		changes, took[changes/2], took[changes*9/10], took[changes-1])
	require.Eventually(t, func() bool {
		limit, _ := checkHTTP(t, c, a, "last"+strconv.FormatInt(time.Now().UnixNano(), 10))
		return limit == 249
	}, time.Second, 5*time.Millisecond, "the writer's side sees it too")
	_, ready := readyz(t, a)
	require.Equal(t, strconv.FormatInt(r.Revision, 10), ready.Revision)
	require.Equal(t, 1.0, metric(t, a, `ratelimitd_rules_info{revision="`+ready.Revision+`"}`))
	for _, p := range []*ratelimitdtest.Daemon{a, b} {
		require.NotContains(t, p.Logs(), "s3cret-pw", "the DSN's password is never logged")
		require.Contains(t, p.Logs(), "xxxxx")
	}
}

// `ratelimitd serve --db file:…` with nothing else: the database is
// created, served, and a rule written to it (another handle) is in force
// within a second.
func TestServeDBSQLite(t *testing.T) {
	t.Parallel()
	ctx := dbctx(t)
	dsn := "file:" + filepath.Join(t.TempDir(), "rules.db")
	p := startServer(t, nil, "--db", dsn)
	c := apiClient(t, &http.Client{Timeout: 5 * time.Second})
	require.Eventually(t, func() bool {
		code, _ := readyz(t, p)
		return code == http.StatusOK
	}, 5*time.Second, 20*time.Millisecond)
	_, ready := readyz(t, p)
	require.Equal(t, "0", ready.Revision)
	limit, ok := checkHTTP(t, c, p, "ann")
	require.True(t, ok)
	require.Zero(t, limit, "no rule yet")

	admin, err := rulesdb.Open(ctx, dsn)
	require.NoError(t, err)
	defer admin.Close()
	_, err = admin.Create(ctx, "alice", ordersRule(2))
	require.NoError(t, err)
	start := time.Now()
	require.Eventually(t, func() bool {
		limit, _ := checkHTTP(t, c, p, "probe"+strconv.FormatInt(time.Now().UnixNano(), 10))
		return limit == 2
	}, 2*time.Second, 10*time.Millisecond)
	t.Logf("SQLite (poll 500ms): in force after %v", time.Since(start))
	_, ok = checkHTTP(t, c, p, "bob")
	require.True(t, ok)
	_, ok = checkHTTP(t, c, p, "bob")
	require.True(t, ok)
	_, ok = checkHTTP(t, c, p, "bob")
	require.False(t, ok, "the database's rule decides: 2 per hour")
	_, ready = readyz(t, p)
	require.Equal(t, "1", ready.Revision)
	require.NoError(t, p.Close(), p.Logs())
}

// An instance restarted while PostgreSQL is down starts from its
// --rules-cache: readiness says cached, with the cache's age, and the
// cached rules decide; the admin API (problem+json, no database detail)
// and the admin page answer 503. When the database is back the instance
// catches up on a change and serves the admin API and page.
func TestServeDBStartsFromCacheWhileDown(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t)
	ctx := dbctx(t)
	admin, err := rulesdb.Open(ctx, srv.DSN())
	require.NoError(t, err)
	defer admin.Close()
	_, err = admin.Create(ctx, "alice", ordersRule(2))
	require.NoError(t, err)
	secret, _, err := admin.CreateToken(ctx, "cli:test", "ops", rulesdb.ScopeRead)
	require.NoError(t, err)
	rev, err := admin.Revision(ctx)
	require.NoError(t, err)
	cache := filepath.Join(t.TempDir(), "rules-cache.json")
	args := []string{"--db", srv.DSN(), "--rules-cache", cache, "--db-poll", "100ms"}
	c := apiClient(t, &http.Client{Timeout: 5 * time.Second})

	one := startServer(t, nil, args...)
	_, ready := readyz(t, one)
	require.Equal(t, strconv.FormatInt(rev, 10), ready.Revision)
	require.NoError(t, one.Close(), one.Logs())
	written := time.Now() // the cache was written before

	srv.Kill()
	two := startServer(t, nil, args...)
	require.Eventually(t, func() bool {
		code, _ := readyz(t, two)
		return code == http.StatusOK
	}, 5*time.Second, 20*time.Millisecond, "serving from the cache is ready")
	requireServesFromCache(t, two, rev, written, secret)

	srv.Restart(t)
	var updated *rulesdb.Rule
	require.Eventually(t, func() bool {
		updated, err = admin.Update(ctx, "alice", ordersRule(5), "*")
		return err == nil
	}, 10*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool {
		_, ready := readyz(t, two)
		return ready.Revision == strconv.FormatInt(updated.Revision, 10) && !ready.Cached
	}, 15*time.Second, 50*time.Millisecond, two.Logs())
	limit, ok := checkHTTP(t, c, two, "bob")
	require.True(t, ok)
	require.EqualValues(t, 5, limit)
	require.Eventually(t, func() bool {
		return adminCall(t, c, two, secret, "GET", "/api/v1/rules", "").status == http.StatusOK
	}, 5*time.Second, 20*time.Millisecond, "the admin API once the database is reached")
	require.Eventually(t, func() bool {
		resp, _ := page(t, pageClient(t), http.MethodGet, two.URL("/admin/login"), nil)
		return resp.StatusCode == http.StatusOK
	}, 5*time.Second, 20*time.Millisecond, "the admin page once the database is reached")
}

// requireServesFromCache checks an instance started from its rules cache
// (written before written, at revision rev) while the database is down:
// readiness says cached, with the cache's age; the cached rules decide;
// the admin API (with secret) and the admin page answer 503.
func requireServesFromCache(t *testing.T, p instance, rev int64, written time.Time, secret string) {
	t.Helper()
	asked := time.Now()
	_, ready := readyz(t, p)
	cached := strconv.FormatInt(rev, 10) + " (cached)"
	require.Equal(t, cached, ready.Revision)
	require.True(t, ready.Cached)
	require.NotNil(t, ready.LoadedAt)
	require.True(t, ready.LoadedAt.Before(written), "the age of cached rules is the cache's: %v", ready.LoadedAt)
	require.GreaterOrEqual(t, ready.AgeSeconds, asked.Sub(written).Seconds())
	require.Equal(t, 1.0, metric(t, p, `ratelimitd_rules_info{revision="`+cached+`"}`))
	c := apiClient(t, &http.Client{Timeout: 5 * time.Second})
	for i := range 3 {
		limit, ok := checkHTTP(t, c, p, "ann")
		require.EqualValues(t, 2, limit)
		require.Equal(t, i < 2, ok, "check %d: the cached rules decide", i+1)
	}
	r := adminCall(t, c, p, secret, "GET", "/api/v1/rules", "")
	require.Equal(t, http.StatusServiceUnavailable, r.status, r.raw)
	require.Equal(t, "application/problem+json", r.header.Get("Content-Type"))
	require.NotContains(t, r.raw, "127.0.0.1", "no database detail")
	resp, _ := page(t, pageClient(t), http.MethodGet, p.URL("/admin/login"), nil)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
}

func TestServeDBFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--db", "file:x.db", "--rules", "r.yaml"}, "--db, --rules: give one or the other"},
		{[]string{"--rules-cache", "c.json"}, "--rules-cache: needs --db"},
		{[]string{"--db", "file:x.db", "--rules-cache", "/nonexistent-dir/c.json"}, "--rules-cache: the directory of /nonexistent-dir/c.json must exist"},
		{[]string{"--db", "mysql://u:hunter2@h/db"}, "--db: want file:PATH or postgres://"},
		{[]string{"--db", "file:x.db", "--db-poll", "0s"}, "--db-poll: must be at least 1ms"},
	} {
		code, _, errOut := runEnv(t, nil, append([]string{"serve", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, tc.args...)...)
		require.Equal(t, 2, code, errOut)
		require.Contains(t, errOut, tc.want)
		require.NotContains(t, errOut, "hunter2")
	}
	// Unreachable, no cache: serve fails (exit 1) naming --db, password
	// redacted.
	code, _, errOut := runEnv(t, nil, "serve", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--db", "postgres://app:hunter2@127.0.0.1:1/rules?connect_timeout=2")
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "--db")
	require.NotContains(t, errOut, "hunter2")
}
