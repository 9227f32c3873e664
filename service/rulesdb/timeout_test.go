package rulesdb

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
)

// throughProxy returns a proxy to the PostgreSQL server of dsn and the DSN
// that reaches it through the proxy.
func throughProxy(t *testing.T, dsn string) (*redistest.Proxy, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	p := redistest.NewProxy(t, u.Host)
	u.Host = p.Addr
	return p, u.String()
}

// With the connections to PostgreSQL black-holed (bytes stop; nothing is
// closed), every call of the DB fails within its timeout (plus slack),
// with an error wrapping context.DeadlineExceeded, and a write whose
// transaction was cut leaves nothing: the database afterwards holds
// exactly what was committed before.
func TestCallsBoundedWhenPartitioned(t *testing.T) {
	ctx := tctx(t)
	dsn := pg.NewDatabase(t)
	proxy, via := throughProxy(t, dsn)
	const timeout = 300 * time.Millisecond
	d, err := Open(ctx, via, WithTimeout(timeout))
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	r, err := d.Create(ctx, "alice", sample("orders"))
	require.NoError(t, err)
	secret, _, err := d.CreateToken(ctx, "alice", "ops", ScopeWrite)
	require.NoError(t, err)
	before, err := d.Revision(ctx)
	require.NoError(t, err)

	proxy.Stall()
	src := d.Source(time.Hour)
	calls := []struct {
		name string
		call func(context.Context) error
	}{
		{"Revision", func(ctx context.Context) error { _, err := d.Revision(ctx); return err }},
		{"Get", func(ctx context.Context) error { _, err := d.Get(ctx, "orders"); return err }},
		{"List", func(ctx context.Context) error { _, _, err := d.List(ctx, "", 10); return err }},
		{"ListRules", func(ctx context.Context) error { _, _, err := d.ListRules(ctx, RuleFilter{}, "", 10); return err }},
		{"All", func(ctx context.Context) error { _, err := d.All(ctx); return err }},
		{"Create", func(ctx context.Context) error { _, err := d.Create(ctx, "alice", sample("new")); return err }},
		{"Update", func(ctx context.Context) error {
			n := *r
			n.Limit = 9
			_, err := d.Update(ctx, "alice", n, "*")
			return err
		}},
		{"Delete", func(ctx context.Context) error { _, err := d.Delete(ctx, "alice", "orders", "*"); return err }},
		{"Import", func(ctx context.Context) error {
			_, err := d.Import(ctx, "alice", []Rule{sample("imported")})
			return err
		}},
		{"SetTier", func(ctx context.Context) error { _, err := d.SetTier(ctx, "alice", "user", "u1", "gold"); return err }},
		{"SetOverride", func(ctx context.Context) error {
			_, err := d.SetOverride(ctx, "alice", Override{Dimension: "user", Identifier: "u1", RuleID: "orders", Block: true, ExpiresAt: time.Now().Add(time.Hour)})
			return err
		}},
		{"ClearOverride", func(ctx context.Context) error {
			_, err := d.ClearOverride(ctx, "alice", "user", "u1", "orders")
			return err
		}},
		{"Overrides", func(ctx context.Context) error { _, err := d.Overrides(ctx, "user", "u1", time.Now()); return err }},
		{"Audit", func(ctx context.Context) error { _, err := d.Audit(ctx, 0, 10); return err }},
		{"AuditQuery", func(ctx context.Context) error { _, _, err := d.AuditQuery(ctx, AuditFilter{}); return err }},
		{"Authenticate", func(ctx context.Context) error { _, err := d.Authenticate(ctx, secret); return err }},
		{"CreateToken", func(ctx context.Context) error {
			_, _, err := d.CreateToken(ctx, "alice", "other", ScopeRead)
			return err
		}},
		{"RevokeToken", func(ctx context.Context) error { return d.RevokeToken(ctx, "alice", "ops") }},
		{"Tokens", func(ctx context.Context) error { _, err := d.Tokens(ctx); return err }},
		{"BeginIdempotent", func(ctx context.Context) error { _, err := d.BeginIdempotent(ctx, "ops", "k", []byte{1}); return err }},
		{"FinishIdempotent", func(ctx context.Context) error {
			return d.FinishIdempotent(ctx, "ops", "k", StoredResponse{Status: 200})
		}},
		{"Source.Load", func(ctx context.Context) error { _, err := src.Load(ctx); return err }},
	}
	// All at once: more calls than the pool has connections, so some
	// wait for one, within the same bound.
	errs := make([]error, len(calls))
	took := make([]time.Duration, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Go(func() {
			start := time.Now()
			errs[i] = c.call(context.Background()) // no deadline of its own
			took[i] = time.Since(start)
		})
	}
	wg.Wait()
	for i, c := range calls {
		require.Error(t, errs[i], c.name)
		require.True(t, errors.Is(errs[i], context.DeadlineExceeded), "%s: %v", c.name, errs[i])
		require.Less(t, took[i], timeout+time.Second, "%s took %s", c.name, took[i])
	}

	proxy.Resume()
	direct := open(t, dsn)
	require.Eventually(t, func() bool { _, err := d.Revision(ctx); return err == nil }, 10*time.Second, 20*time.Millisecond)
	after, err := direct.Revision(ctx)
	require.NoError(t, err)
	require.Equal(t, before, after, "no write sent during the partition committed")
	es, err := direct.Audit(ctx, 0, 100)
	require.NoError(t, err)
	require.Len(t, es, int(after), "one audit row per revision")
}

// A transaction of an instance cut off from PostgreSQL mid-way (it holds
// the revision row's lock, which every write takes) is ended by the
// server once idle for the instance's timeout, so the other instances'
// writes go on; without that they would wait until the server noticed
// the dead connection (hours, with TCP's defaults).
func TestPartitionedTransactionReleasesTheRevisionLock(t *testing.T) {
	ctx := tctx(t)
	dsn := pg.NewDatabase(t)
	proxy, via := throughProxy(t, dsn)
	const timeout = 300 * time.Millisecond
	b, err := Open(ctx, via, WithTimeout(timeout))
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	var setting string
	require.NoError(t, b.db.QueryRowContext(ctx, `SHOW idle_in_transaction_session_timeout`).Scan(&setting))
	require.Equal(t, strconv.FormatInt(timeout.Milliseconds(), 10)+"ms", setting)

	a := open(t, dsn)
	bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tx, err := b.begin(bctx) // SELECT ... FOR UPDATE: B holds the revision lock
	require.NoError(t, err)
	proxy.Stall()

	start := time.Now()
	_, err = a.Create(ctx, "alice", sample("orders"))
	require.NoError(t, err, "A's write waits out B's abandoned transaction only")
	require.Less(t, time.Since(start), timeout+2*time.Second)
	t.Logf("A's write committed %s after B was cut off mid-transaction", time.Since(start))
	proxy.Resume()
	_ = tx.Rollback()
}
