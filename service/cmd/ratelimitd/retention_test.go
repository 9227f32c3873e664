package main

import (
	"context"
	"database/sql"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/rulesdb"
)

// ratelimitd with --audit-retention 24h prunes, at start, the audit rows
// older than a day (here two of three, aged by hand) and keeps the rest;
// the rules stay in force, and a change written after the prune is put in
// force as any other (checks decide under it). On SQLite and PostgreSQL.
func TestServeAuditRetention(t *testing.T) {
	t.Parallel()
	for _, b := range []struct{ name, dsn string }{
		{"sqlite", "file:" + filepath.Join(t.TempDir(), "rules.db")},
		{"postgres", pg.NewDatabase(t)},
	} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			testServeAuditRetention(t, b.dsn)
		})
	}
}

func testServeAuditRetention(t *testing.T, dsn string) {
	ctx := dbctx(t)
	db, err := rulesdb.Open(ctx, dsn)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Create(ctx, "setup", ordersRule(3)) // revision 1
	require.NoError(t, err)
	_, err = db.SetTier(ctx, "setup", "user", "alice", "gold") // 2
	require.NoError(t, err)
	_, err = db.SetTier(ctx, "setup", "user", "bob", "gold") // 3: kept
	require.NoError(t, err)
	ageAudit(t, ctx, dsn, 48*time.Hour, 1, 2)

	p := startServer(t, nil, "--db", dsn, "--db-poll", "50ms", "--audit-retention", "24h")
	require.Eventually(t, func() bool {
		es, err := db.Audit(ctx, 0, 10)
		return err == nil && len(es) == 1
	}, 10*time.Second, 20*time.Millisecond, "the two rows older than a day are pruned")
	es, err := db.Audit(ctx, 0, 10)
	require.NoError(t, err)
	require.EqualValues(t, 3, es[0].Revision)
	require.Contains(t, p.Logs(), "audit pruned")

	hc := &http.Client{Timeout: 5 * time.Second}
	limit, _ := checkHTTP(t, hc, p, "carol")
	require.EqualValues(t, 3, limit, "the rules are in force")
	cur, err := db.Get(ctx, "orders")
	require.NoError(t, err)
	saved, err := db.Update(ctx, "ops", ordersRule(1), cur.ETag)
	require.NoError(t, err)
	require.EqualValues(t, 4, saved.Revision, "the revision goes on")
	require.Eventually(t, func() bool {
		limit, _ := checkHTTP(t, hc, p, "probe"+time.Now().Format("150405.000000000"))
		return limit == 1
	}, 5*time.Second, 20*time.Millisecond, "a change after the prune is put in force")
	for i, want := range []bool{true, false} {
		_, ok := checkHTTP(t, hc, p, "dave")
		require.Equal(t, want, ok, "check %d under the limit of 1", i+1)
	}
}

// ageAudit moves the audit rows of revs back by age, through a connection
// of its own (as an operator's SQL would).
func ageAudit(t *testing.T, ctx context.Context, dsn string, age time.Duration, revs ...int64) {
	t.Helper()
	driver, name := "sqlite", strings.TrimPrefix(dsn, "file:")
	if rulesdb.IsPostgres(dsn) {
		driver, name = "pgx", dsn
	}
	sqlDB, err := sql.Open(driver, name) // the drivers rulesdb registers
	require.NoError(t, err)
	defer sqlDB.Close()
	q := `UPDATE audit SET at = at - ? WHERE revision = ?`
	if rulesdb.IsPostgres(dsn) {
		q = `UPDATE audit SET at = at - $1 WHERE revision = $2`
	}
	for _, rev := range revs {
		_, err := sqlDB.ExecContext(ctx, q, age.Milliseconds(), rev)
		require.NoError(t, err)
	}
}

// --audit-retention needs --db and is 0 or at least an hour.
func TestServeAuditRetentionFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--audit-retention", "24h"}, "--audit-retention: needs --db"},
		{[]string{"--db", "file:x.db", "--audit-retention", "59m"}, "--audit-retention: must be 0 (keep every row) or at least 1h0m0s, got 59m0s"},
		{[]string{"--db", "file:x.db", "--audit-retention", "-1h"}, "--audit-retention: must be 0"},
	} {
		code, _, errOut := runEnv(t, nil, append([]string{"serve", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, tc.args...)...)
		require.Equal(t, 2, code, errOut)
		require.Contains(t, errOut, tc.want)
	}
}
