package rulesdb

import (
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// Instances starting at once on a new database: one migrates, the others
// wait on the lock and find the schema done; no step runs twice.
func TestConcurrentOpenMigratesOnce(t *testing.T) { each(t, testConcurrentOpenMigratesOnce) }

func testConcurrentOpenMigratesOnce(t *testing.T, dsn string) {
	ctx := tctx(t)
	const n = 16
	dbs := make([]*DB, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { dbs[i], errs[i] = Open(ctx, dsn) })
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		t.Cleanup(func() { _ = dbs[i].Close() })
	}
	var rows, maxV int
	require.NoError(t, dbs[0].db.QueryRowContext(ctx, `SELECT COUNT(*), MAX(version) FROM schema_version`).Scan(&rows, &maxV))
	require.Equal(t, SchemaVersion(), rows)
	require.Equal(t, SchemaVersion(), maxV)
	rev, err := dbs[n-1].Revision(ctx)
	require.NoError(t, err)
	require.Zero(t, rev)
}

// Two writers holding the same etag on two handles: the writes serialize
// from their first read, so exactly one wins and the other is stale (no
// lost update), whichever backend.
func TestConcurrentUpdatesSameETag(t *testing.T) { each(t, testConcurrentUpdatesSameETag) }

func testConcurrentUpdatesSameETag(t *testing.T, dsn string) {
	ctx := tctx(t)
	a, b := open(t, dsn), open(t, dsn)
	for round := range 10 {
		cur, err := a.Get(ctx, "orders")
		if round == 0 {
			require.ErrorIs(t, err, ErrNotFound)
			cur, err = a.Create(ctx, "alice", sample("orders"))
		}
		require.NoError(t, err)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, d := range []*DB{a, b} {
			wg.Go(func() {
				r := sample("orders")
				r.Limit = int64(1000*round + i + 1)
				_, errs[i] = d.Update(ctx, "w", r, cur.ETag)
			})
		}
		wg.Wait()
		ok, stale := 0, 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case errors.Is(err, ErrStale):
				stale++
			default:
				require.NoError(t, err)
			}
		}
		require.Equal(t, 1, ok, "round %d: %v", round, errs)
		require.Equal(t, 1, stale, "round %d: %v", round, errs)
	}
	rev, err := b.Revision(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 11, rev, "one create and one winning update per round")
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://app:s3cret@db:5432/rules?sslmode=disable": "postgres://app:xxxxx@db:5432/rules?sslmode=disable",
		"postgresql://db/rules?password=s3cret&user=app":      "postgresql://db/rules?password=xxxxx&user=app",
		"postgres://app@db/rules":                             "postgres://app@db/rules",
		"file:/var/lib/ratelimitd/rules.db":                   "file:/var/lib/ratelimitd/rules.db",
		"/var/lib/rules.db":                                   "/var/lib/rules.db",
		"host=db password=s3cret":                             "(unparsable DSN, redacted)",
	} {
		require.Equal(t, want, Redact(in), in)
	}
}
