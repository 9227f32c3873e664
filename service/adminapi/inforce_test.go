package adminapi

import (
	"database/sql"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/rulesdb"
)

// sqlOf opens e's database with database/sql, for edits made around the
// store (by hand, as an operator with psql or sqlite3 could).
func sqlOf(t *testing.T, e *env) (*sql.DB, func(string) string) {
	t.Helper()
	driver, dsn := "sqlite", strings.TrimPrefix(e.dsn, "file:")
	q := func(s string) string { return s }
	if rulesdb.IsPostgres(e.dsn) {
		driver, dsn = "pgx", e.dsn
		q = func(s string) string {
			for i := 1; strings.Contains(s, "?"); i++ {
				s = strings.Replace(s, "?", "$"+strconv.Itoa(i), 1)
			}
			return s
		}
	}
	db, err := sql.Open(driver, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db, q
}

// newRevision stands, in handEdit's arguments, for the revision it bumps
// to.
type newRevision struct{}

// handEdit runs stmt in one transaction that bumps the revision and writes
// no audit row (so the next load is full), as an operator's edit would.
func handEdit(t *testing.T, e *env, db *sql.DB, stmt string, args ...any) {
	t.Helper()
	tx, err := db.BeginTx(e.ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	var rev int64
	require.NoError(t, tx.QueryRowContext(e.ctx, `UPDATE revision SET value = value + 1 WHERE id = 1 RETURNING value`).Scan(&rev))
	for i, a := range args {
		if _, ok := a.(newRevision); ok {
			args[i] = rev
		}
	}
	_, err = tx.ExecContext(e.ctx, stmt, args...)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
}

// A write committed while the stored rule set cannot be put in force (a
// hand edit made it invalid) is answered 503 saying so: the revision it
// committed and the revision still in force on this instance, at once;
// the change and its audit row are stored. Once the set is valid again,
// the next write is in force when it is answered.
func TestWriteCommittedButRefused(t *testing.T) { onEach(t, testWriteCommittedButRefused) }

func testWriteCommittedButRefused(t *testing.T, e *env) {
	r := e.req("POST", "/api/v1/rules", ordersRule)
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	require.Equal(t, strconv.FormatInt(e.rev(1), 10), e.eng.Snapshot().Revision(), "in force when answered")

	db, q := sqlOf(t, e)
	handEdit(t, e, db, q(`INSERT INTO rules (id, name, dimension, endpoint_pattern, "limit", window_seconds, algorithm, tier, burst, shadow, enabled, revision, created_at, updated_at)
		VALUES ('twin', 'twin', 'user', '/api/orders/**', 5, 60, 'fixed_window', '', 0, ?, ?, ?, 0, 0)`), false, true, newRevision{})

	start := time.Now()
	r = e.req("PUT", "/api/v1/users/u1/tier", `{"tier":"gold"}`)
	requireProblem(t, r, http.StatusServiceUnavailable, "")
	require.Less(t, time.Since(start), e.db.Timeout(), "a refusal is answered at once, not at the bound")
	require.EqualValues(t, e.rev(3), r.body["revision"], r.raw)
	require.EqualValues(t, e.rev(1), r.body["revision_in_force"], r.raw)
	require.Contains(t, r.body["detail"], "committed (revision "+strconv.FormatInt(e.rev(3), 10)+")")
	require.Contains(t, r.body["detail"], "refused")
	require.NotContains(t, r.body["detail"], "twin", "the cause is logged, not sent")
	require.Equal(t, "no-store", r.header.Get("Cache-Control"))
	es, _, err := e.db.AuditQuery(e.ctx, rulesdb.AuditFilter{Target: "tier/user/u1"})
	require.NoError(t, err)
	require.Len(t, es, 1, "the change is committed, with its audit row")
	require.Equal(t, strconv.FormatInt(e.rev(1), 10), e.eng.Snapshot().Revision())
	require.Contains(t, e.logs.String(), "not in force on this instance")

	handEdit(t, e, db, `DELETE FROM rules WHERE id = 'twin'`)
	r = e.req("POST", "/api/v1/users/u2/override", `{"rule_id":"orders","block":true,"ttl_seconds":60}`)
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	require.Equal(t, strconv.FormatInt(e.rev(5), 10), e.eng.Snapshot().Revision())
}

// A write the instance cannot load in time (here: no Watch follows the
// source Sync asks, and the database's bound is short) is answered 503
// after the bound: committed at its revision, not in force yet, naming
// the revision that is.
func TestWriteCommittedNotInForceInTime(t *testing.T) {
	e := newEnv(t)
	slow, err := rulesdb.Open(e.ctx, e.dsn, rulesdb.WithTimeout(150*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = slow.Close() })
	src := slow.Source(time.Hour)
	_, err = src.Load(e.ctx)
	require.NoError(t, err)
	e.api.sync = src // never watched: nothing loads what Sync asks for

	start := time.Now()
	r := e.req("POST", "/api/v1/rules", ordersRule)
	took := time.Since(start)
	requireProblem(t, r, http.StatusServiceUnavailable, "")
	require.GreaterOrEqual(t, took, 150*time.Millisecond)
	require.Less(t, took, 2*time.Second)
	require.EqualValues(t, e.rev(1), r.body["revision"], r.raw)
	require.EqualValues(t, e.rev(0), r.body["revision_in_force"], r.raw)
	require.Contains(t, r.body["detail"], "not in force on this instance in time")
	got, err := e.db.Get(e.ctx, "orders")
	require.NoError(t, err, "committed")
	require.Equal(t, e.rev(1), got.Revision)
}
