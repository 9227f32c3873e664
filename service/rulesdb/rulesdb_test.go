package rulesdb

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/rules"
)

func open(t *testing.T, path string) *DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := Open(ctx, path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func tctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func sample(id string) Rule {
	return Rule{ID: id, Name: "orders", Dimension: "user", EndpointPattern: "/api/orders/**", Limit: 100,
		WindowSeconds: 60, Algorithm: "sliding_window_counter", Enabled: true}
}

func TestMigrations(t *testing.T) { each(t, testMigrations) }

func testMigrations(t *testing.T, dsn string) {
	ctx := tctx(t)
	path := dsn
	d := open(t, path)
	var v int
	require.NoError(t, d.db.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_version`).Scan(&v))
	require.Equal(t, SchemaVersion(), v)
	if !d.pg {
		var mode string
		require.NoError(t, d.db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode))
		require.Equal(t, "wal", mode)
	}
	_, err := d.Create(ctx, "alice", sample("a"))
	require.NoError(t, err)
	require.NoError(t, d.Close())

	// Re-open: no step runs twice, data and revision are kept.
	d = open(t, path)
	var n int
	require.NoError(t, d.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_version`).Scan(&n))
	require.Equal(t, SchemaVersion(), n)
	rev, err := d.Revision(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, rev)
	_, err = d.Get(ctx, "a")
	require.NoError(t, err)

	// A newer schema is refused.
	_, err = d.db.ExecContext(ctx, d.q(`INSERT INTO schema_version (version) VALUES (?)`), SchemaVersion()+1)
	require.NoError(t, err)
	require.NoError(t, d.Close())
	_, err = Open(ctx, path)
	require.ErrorIs(t, err, ErrSchemaTooNew)
	require.ErrorContains(t, err, fmt.Sprintf("schema_version is %d", SchemaVersion()+1))
}

func TestOpenBadDSN(t *testing.T) {
	_, err := Open(tctx(t), " ")
	require.ErrorContains(t, err, "dsn")
	_, err = Open(tctx(t), filepath.Join(t.TempDir(), "missing-dir", "x.db"))
	require.Error(t, err)
	// Nothing listens on a port just closed: a quick error naming the
	// DSN, its password redacted.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	_, err = Open(tctx(t), "postgres://app:s3cret@"+addr+"/rules?sslmode=disable&connect_timeout=2")
	require.Error(t, err)
	require.ErrorContains(t, err, "postgres://app:xxxxx@"+addr)
	require.NotContains(t, err.Error(), "s3cret")
}

func TestCRUDWithETags(t *testing.T) { each(t, testCRUDWithETags) }

func testCRUDWithETags(t *testing.T, dsn string) {
	ctx := tctx(t)
	d := open(t, dsn)

	a, err := d.Create(ctx, "alice", sample("orders"))
	require.NoError(t, err)
	require.Equal(t, `"1"`, a.ETag)
	_, err = d.Create(ctx, "alice", sample("orders"))
	require.ErrorIs(t, err, ErrExists)

	got, err := d.Get(ctx, "orders")
	require.NoError(t, err)
	require.Equal(t, a.ETag, got.ETag)
	require.Equal(t, int64(100), got.Limit)
	require.Equal(t, "/api/orders/**", got.EndpointPattern)
	require.True(t, got.Enabled)

	upd := sample("orders")
	upd.Limit = 200
	b, err := d.Update(ctx, "bob", upd, a.ETag)
	require.NoError(t, err)
	require.NotEqual(t, a.ETag, b.ETag)
	_, err = d.Update(ctx, "bob", upd, a.ETag) // stale
	require.ErrorIs(t, err, ErrStale)
	got, err = d.Get(ctx, "orders")
	require.NoError(t, err)
	require.Equal(t, int64(200), got.Limit)
	require.Equal(t, b.ETag, got.ETag)
	_, err = d.Update(ctx, "bob", sample("nope"), "*")
	require.ErrorIs(t, err, ErrNotFound)

	_, err = d.Delete(ctx, "bob", "orders", a.ETag)
	require.ErrorIs(t, err, ErrStale)
	_, err = d.Delete(ctx, "bob", "orders", b.ETag)
	require.NoError(t, err)
	_, err = d.Get(ctx, "orders")
	require.ErrorIs(t, err, ErrNotFound)
	_, err = d.Delete(ctx, "bob", "orders", "*")
	require.ErrorIs(t, err, ErrNotFound)
}

func TestListCursor(t *testing.T) { each(t, testListCursor) }

func testListCursor(t *testing.T, dsn string) {
	ctx := tctx(t)
	d := open(t, dsn)
	for _, id := range []string{"e", "a", "c", "b", "d"} {
		r := sample(id)
		r.EndpointPattern = "/" + id
		_, err := d.Create(ctx, "alice", r)
		require.NoError(t, err)
	}
	var ids []string
	cursor, pages := "", 0
	for {
		page, next, err := d.List(ctx, cursor, 2)
		require.NoError(t, err)
		for _, r := range page {
			ids = append(ids, r.ID)
		}
		pages++
		if next == "" {
			break
		}
		cursor = next
	}
	require.Equal(t, []string{"a", "b", "c", "d", "e"}, ids)
	require.Equal(t, 3, pages)
	_, _, err := d.List(ctx, "", 0)
	require.ErrorContains(t, err, "limit")
}

func TestAuditOneRowPerChange(t *testing.T) { each(t, testAuditOneRowPerChange) }

func testAuditOneRowPerChange(t *testing.T, dsn string) {
	ctx := tctx(t)
	d := open(t, dsn)
	a, err := d.Create(ctx, "alice", sample("r1"))
	require.NoError(t, err)
	bad := sample("r2")
	bad.Limit = 0
	_, err = d.Create(ctx, "alice", bad) // refused: no audit row
	require.Error(t, err)
	upd := sample("r1")
	upd.Shadow = true
	b, err := d.Update(ctx, "bob", upd, a.ETag)
	require.NoError(t, err)
	_, err = d.Update(ctx, "bob", upd, a.ETag) // stale: no audit row
	require.ErrorIs(t, err, ErrStale)
	_, err = d.Delete(ctx, "carol", "r1", b.ETag)
	require.NoError(t, err)

	log, err := d.Audit(ctx, 0, 100)
	require.NoError(t, err)
	require.Len(t, log, 3)
	require.Equal(t, []string{"rule.create", "rule.update", "rule.delete"}, []string{log[0].Action, log[1].Action, log[2].Action})
	require.Equal(t, []string{"alice", "bob", "carol"}, []string{log[0].Actor, log[1].Actor, log[2].Actor})
	require.Nil(t, log[0].Before)
	require.Contains(t, string(log[0].After), `"limit":100`)
	require.Contains(t, string(log[1].Before), `"shadow":false`)
	require.Contains(t, string(log[1].After), `"shadow":true`)
	require.Nil(t, log[2].After)
	require.Equal(t, "rule/r1", log[2].Target)
	rev, err := d.Revision(ctx)
	require.NoError(t, err)
	require.Equal(t, log[2].Revision, rev, "the revision moves only with committed writes")
	_, err = d.Create(ctx, " ", sample("x"))
	require.ErrorContains(t, err, "actor")
}

// A rule's lease_seconds is stored to the microsecond, read back as
// written, and is its rules.Rule's Lease in the snapshot.
func TestRuleLease(t *testing.T) { each(t, testRuleLease) }

func testRuleLease(t *testing.T, dsn string) {
	ctx := tctx(t)
	d := open(t, dsn)
	r := sample("global")
	r.Algorithm, r.LeaseSeconds = "fixed_window", 0.25
	_, err := d.Create(ctx, "alice", r)
	require.NoError(t, err)
	got, err := d.Get(ctx, "global")
	require.NoError(t, err)
	require.Equal(t, 0.25, got.LeaseSeconds)
	s, err := d.Source(time.Hour).Load(ctx)
	require.NoError(t, err)
	require.Equal(t, 250*time.Millisecond, s.Rules()[0].Lease)
}

func TestInvalidRuleNeverStored(t *testing.T) { each(t, testInvalidRuleNeverStored) }

func testInvalidRuleNeverStored(t *testing.T, dsn string) {
	ctx := tctx(t)
	d := open(t, dsn)
	_, err := d.Create(ctx, "alice", sample("base"))
	require.NoError(t, err)
	for name, c := range map[string]struct {
		field string // the Rule's member the refusal names
		mut   func(*Rule)
	}{
		"id":                        {"id", func(r *Rule) { r.ID = "bad id!" }},
		"limit":                     {"limit", func(r *Rule) { r.Limit = -1 }},
		"window_seconds":            {"window_seconds", func(r *Rule) { r.WindowSeconds = 0 }},
		"algorithm":                 {"algorithm", func(r *Rule) { r.Algorithm = "magic" }},
		"dimension":                 {"dimension", func(r *Rule) { r.Dimension = "" }},
		"endpoint_pattern":          {"endpoint_pattern", func(r *Rule) { r.EndpointPattern = "no-slash" }},
		"burst":                     {"burst", func(r *Rule) { r.Algorithm = "fixed_window"; r.Burst = 5 }},
		"endpoint_pattern conflict": {"endpoint_pattern", func(r *Rule) {}}, // same dimension and pattern as "base", no tier
		"tier":                      {"tier", func(r *Rule) { r.Tier = "gold"; r.EndpointPattern = "/other" }},
		"lease of a log":            {"lease_seconds", func(r *Rule) { r.Algorithm = "sliding_window_log"; r.EndpointPattern = "/log"; r.LeaseSeconds = 0.1 }},
		"lease negative":            {"lease_seconds", func(r *Rule) { r.EndpointPattern = "/neg"; r.LeaseSeconds = -1 }},
		"lease of a tier row":       {"lease_seconds", func(r *Rule) { r.Tier = "gold"; r.LeaseSeconds = 0.1 }},
	} {
		t.Run(name, func(t *testing.T) {
			r := sample("new")
			c.mut(&r)
			_, err := d.Create(ctx, "alice", r)
			require.ErrorIs(t, err, ErrInvalid)
			var fe *core.FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, c.field, fe.Field, "%v", err)
			var re *rules.RuleError
			require.ErrorAs(t, err, &re)
			require.Contains(t, []string{"new", "bad id!", "base"}, re.ID, "the rule the refusal is about")
			list, _, err := d.List(ctx, "", 100)
			require.NoError(t, err)
			require.Len(t, list, 1)
			rev, err := d.Revision(ctx)
			require.NoError(t, err)
			require.EqualValues(t, 1, rev)
		})
	}
	// Disabled rules are validated too.
	r := sample("off")
	r.Enabled, r.Limit = false, 0
	_, err = d.Create(ctx, "alice", r)
	require.ErrorIs(t, err, ErrInvalid)
	// Deleting the base of a tiered rule would leave an invalid set.
	gold := sample("gold")
	gold.Tier, gold.Limit = "gold", 1000
	_, err = d.Create(ctx, "alice", gold)
	require.NoError(t, err)
	_, err = d.Delete(ctx, "alice", "base", "*")
	require.ErrorIs(t, err, ErrInvalid)
	_, err = d.Get(ctx, "base")
	require.NoError(t, err)
}

func TestSourceSnapshot(t *testing.T) { each(t, testSourceSnapshot) }

func testSourceSnapshot(t *testing.T, dsn string) {
	ctx := tctx(t)
	d := open(t, dsn)
	_, err := d.Create(ctx, "a", sample("orders"))
	require.NoError(t, err)
	gold := sample("orders-gold")
	gold.Tier, gold.Limit = "gold", 1000
	_, err = d.Create(ctx, "a", gold)
	require.NoError(t, err)
	off := sample("off")
	off.Dimension, off.Enabled = "ip", false
	_, err = d.Create(ctx, "a", off)
	require.NoError(t, err)
	_, err = d.db.ExecContext(ctx, `INSERT INTO user_tiers (dimension, identifier, tier, revision, updated_at) VALUES ('user', 'u1', 'gold', 0, 0)`)
	require.NoError(t, err)

	snap, err := d.Source(0).Load(ctx)
	require.NoError(t, err)
	require.Equal(t, "3", snap.Revision())
	require.Len(t, snap.Rules(), 1)
	m := snap.Match("", "user", "/api/orders/7")
	require.Len(t, m, 1)
	require.Equal(t, "orders", m[0].ID)
	require.EqualValues(t, 100, m[0].Limit.Rate)
	require.Equal(t, time.Minute, m[0].Limit.Period)
	require.EqualValues(t, 1000, m[0].Tiers["gold"].Rate)
	require.Equal(t, "gold", snap.TierOf("user", "u1"))
	require.Empty(t, snap.Match("", "ip", "/api/orders/7"), "disabled rules are not served")
}

// watch runs src.Watch in the background and returns channels of what it
// applies and reports.
func watch(t *testing.T, src rules.Source) (<-chan *rules.Snapshot, <-chan error) {
	ctx, cancel := context.WithCancel(context.Background())
	applied := make(chan *rules.Snapshot, 16)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		require.NoError(t, src.Watch(ctx, func(s *rules.Snapshot) error { applied <- s; return nil }, func(err error) { errs <- err }))
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return applied, errs
}

func TestSourceWatchSeesOtherHandle(t *testing.T) { each(t, testSourceWatchSeesOtherHandle) }

func testSourceWatchSeesOtherHandle(t *testing.T, dsn string) {
	ctx := tctx(t)
	path := dsn
	reader, writer := open(t, path), open(t, path)
	src := reader.Source(50 * time.Millisecond)
	snap, err := src.Load(ctx)
	require.NoError(t, err)
	require.Empty(t, snap.Rules())
	applied, errs := watch(t, src)

	start := time.Now()
	_, err = writer.Create(ctx, "alice", sample("orders"))
	require.NoError(t, err)
	select {
	case s := <-applied:
		require.Equal(t, "1", s.Revision())
		require.Len(t, s.Rules(), 1)
		require.Less(t, time.Since(start), time.Second)
	case err := <-errs:
		t.Fatalf("unexpected error: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("no snapshot within 5s")
	}

	// An invalid set written behind the store's back is reported; the last
	// good snapshot stays (nothing applied) until the set is fixed.
	_, err = writer.db.ExecContext(ctx, `UPDATE rules SET "limit" = 0`)
	require.NoError(t, err)
	_, err = writer.db.ExecContext(ctx, `UPDATE revision SET value = value + 1`)
	require.NoError(t, err)
	select {
	case err := <-errs:
		require.ErrorIs(t, err, ErrInvalid)
		require.ErrorContains(t, err, "limit")
	case s := <-applied:
		t.Fatalf("applied an invalid set at revision %s", s.Revision())
	case <-time.After(5 * time.Second):
		t.Fatal("no error within 5s")
	}
	_, err = writer.db.ExecContext(ctx, `UPDATE rules SET "limit" = 7`)
	require.NoError(t, err)
	_, err = writer.db.ExecContext(ctx, `UPDATE revision SET value = value + 1`)
	require.NoError(t, err)
	select {
	case s := <-applied:
		require.Equal(t, "3", s.Revision())
		require.EqualValues(t, 7, s.Rules()[0].Limit.Rate)
	case err := <-errs:
		t.Fatalf("unexpected error: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("no snapshot within 5s")
	}
}

func TestClosedDBIsAnError(t *testing.T) { each(t, testClosedDBIsAnError) }

func testClosedDBIsAnError(t *testing.T, dsn string) {
	ctx := tctx(t)
	d := open(t, dsn)
	src := d.Source(20 * time.Millisecond)
	applied, errs := watch(t, src)
	require.NoError(t, d.Close())
	_, err := d.Create(ctx, "alice", sample("x"))
	require.Error(t, err)
	_, err = d.Get(ctx, "x")
	require.Error(t, err)
	_, _, err = d.List(ctx, "", 10)
	require.Error(t, err)
	_, err = src.Load(ctx)
	require.Error(t, err)
	select {
	case err := <-errs:
		require.ErrorContains(t, err, "closed")
	case <-applied:
		t.Fatal("applied a snapshot of a closed database")
	case <-time.After(5 * time.Second):
		t.Fatal("no error within 5s")
	}
}

func TestLockedDBIsAnError(t *testing.T) {
	ctx := tctx(t)
	path := sqliteOnly(t)
	holder := open(t, path)
	d := open(t, path+"?_pragma=busy_timeout(100)")
	tx, err := holder.db.BeginTx(ctx, nil) // immediate: holds the write lock
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, err = tx.ExecContext(ctx, `UPDATE revision SET value = value + 1`)
	require.NoError(t, err)
	// Readers do not wait on the writer (WAL, deferred read transaction).
	_, err = d.Source(0).Load(ctx)
	require.NoError(t, err)
	start := time.Now()
	_, err = d.Create(ctx, "alice", sample("x"))
	require.Error(t, err)
	require.True(t, errors.Is(err, ErrInvalid) == false)
	require.Less(t, time.Since(start), 5*time.Second)
	require.NoError(t, tx.Rollback())
	_, err = d.Create(ctx, "alice", sample("x"))
	require.NoError(t, err, "works again once the lock is released")
}

func TestReadRulesStrict(t *testing.T) {
	_, err := ReadRules(strings.NewReader(`[{"id": "a", "limt": 5}]`))
	require.ErrorContains(t, err, "rules[0]")
	require.ErrorContains(t, err, "limt")
	_, err = ReadRules(strings.NewReader(`{"id": "a"}`))
	require.ErrorContains(t, err, "JSON array")
	rs, err := ReadRules(strings.NewReader(`[{"id": "a", "enabled": false}, {"id": "b"}]`))
	require.NoError(t, err)
	require.False(t, rs[0].Enabled)
	require.True(t, rs[1].Enabled)
}

func TestSetTier(t *testing.T) { each(t, testSetTier) }

func testSetTier(t *testing.T, dsn string) {
	ctx := tctx(t)
	d := open(t, dsn)
	src := d.Source(0)
	_, err := d.SetTier(ctx, "alice", "user", "u1", "gold")
	require.NoError(t, err)
	_, err = d.SetTier(ctx, "alice", "user", "u1", "gold")
	require.NoError(t, err) // no change: no audit row
	snap, err := src.Load(ctx)
	require.NoError(t, err)
	require.Equal(t, "gold", snap.TierOf("user", "u1"))
	_, err = d.SetTier(ctx, "bob", "user", "u1", "silver")
	require.NoError(t, err)
	_, err = d.SetTier(ctx, "bob", "user", "u1", "")
	require.NoError(t, err)
	snap, err = src.Load(ctx)
	require.NoError(t, err)
	require.Equal(t, "", snap.TierOf("user", "u1"))
	require.Equal(t, "3", snap.Revision())

	_, err = d.SetTier(ctx, "bob", "bad dim!", "u1", "gold")
	require.ErrorIs(t, err, ErrInvalid)
	var fe *core.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "dimension", fe.Field)
	_, err = d.SetTier(ctx, "bob", "user", "u1", "  ")
	require.ErrorContains(t, err, "tier")
	_, err = d.SetTier(ctx, "bob", "user", "", "gold")
	require.ErrorContains(t, err, "identifier")

	log, err := d.Audit(ctx, 0, 100)
	require.NoError(t, err)
	require.Len(t, log, 3)
	require.Equal(t, []string{"tier.set", "tier.set", "tier.clear"}, []string{log[0].Action, log[1].Action, log[2].Action})
	require.JSONEq(t, `{"dimension":"user","identifier":"u1","tier":"gold"}`, string(log[1].Before))
	require.JSONEq(t, `{"dimension":"user","identifier":"u1","tier":"silver"}`, string(log[1].After))
	require.Equal(t, "tier/user/u1", log[2].Target)
	require.Nil(t, log[2].After)
}

// Writers on two handles (two processes' worth of connections) serialize:
// every write commits, revisions are unique and the audit has one row each.
func TestConcurrentWriters(t *testing.T) { each(t, testConcurrentWriters) }

func testConcurrentWriters(t *testing.T, dsn string) {
	ctx := tctx(t)
	path := dsn
	dbs := []*DB{open(t, path), open(t, path)}
	const perWorker = 10
	var wg sync.WaitGroup
	errs := make(chan error, 4*perWorker)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := dbs[w%2]
			for i := range perWorker {
				r := sample(fmt.Sprintf("w%d-%d", w, i))
				r.EndpointPattern = "/" + r.ID
				if _, err := d.Create(ctx, "load", r); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	rev, err := dbs[0].Revision(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 4*perWorker, rev)
	log, err := dbs[1].Audit(ctx, 0, 1000)
	require.NoError(t, err)
	require.Len(t, log, 4*perWorker)
	for i, e := range log {
		require.EqualValues(t, i+1, e.Revision)
	}
}

func TestOverrides(t *testing.T) { each(t, testOverrides) }

func testOverrides(t *testing.T, dsn string) {
	ctx := tctx(t)
	d := open(t, dsn)
	now := time.Date(2026, 11, 24, 4, 0, 0, 0, time.UTC)
	d.now = func() time.Time { return now }
	_, err := d.Create(ctx, "alice", sample("orders"))
	require.NoError(t, err)
	o := Override{Dimension: "user", Identifier: "u1", RuleID: "orders", Limit: 5000, WindowSeconds: 60, ExpiresAt: now.Add(time.Hour)}
	_, err = d.SetOverride(ctx, "alice", o)
	require.NoError(t, err)
	got, err := d.Overrides(ctx, "user", "u1", now)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.EqualValues(t, 5000, got[0].Limit)
	// It lapses at its instant, with no write.
	got, err = d.Overrides(ctx, "user", "u1", now.Add(time.Hour))
	require.NoError(t, err)
	require.Empty(t, got)

	block := Override{Dimension: "user", Identifier: "u1", RuleID: "orders", Block: true, ExpiresAt: now.Add(time.Minute)}
	_, err = d.SetOverride(ctx, "bob", block)
	require.NoError(t, err) // replaces
	got, err = d.Overrides(ctx, "user", "u1", now)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.True(t, got[0].Block)

	for field, bad := range map[string]Override{
		"rule_id":        {Dimension: "user", Identifier: "u1", RuleID: "nope", Block: true, ExpiresAt: now.Add(time.Hour)},
		"dimension":      {Dimension: "ip", Identifier: "u1", RuleID: "orders", Block: true, ExpiresAt: now.Add(time.Hour)},
		"expires_at":     {Dimension: "user", Identifier: "u1", RuleID: "orders", Block: true, ExpiresAt: now},
		"window_seconds": {Dimension: "user", Identifier: "u1", RuleID: "orders", Limit: 5, ExpiresAt: now.Add(time.Hour)},
		"limit":          {Dimension: "user", Identifier: "u1", RuleID: "orders", Limit: -5, WindowSeconds: 1, ExpiresAt: now.Add(time.Hour)},
		"block":          {Dimension: "user", Identifier: "u1", RuleID: "orders", Block: true, Limit: 5, ExpiresAt: now.Add(time.Hour)},
		"identifier":     {Dimension: "user", RuleID: "orders", Block: true, ExpiresAt: now.Add(time.Hour)},
	} {
		_, err := d.SetOverride(ctx, "bob", bad)
		require.ErrorIs(t, err, ErrInvalid, field)
		require.ErrorContains(t, err, field)
	}
	_, err = d.ClearOverride(ctx, "carol", "user", "u1", "orders")
	require.NoError(t, err)
	_, err = d.ClearOverride(ctx, "carol", "user", "u1", "orders")
	require.ErrorIs(t, err, ErrNotFound)
	got, err = d.Overrides(ctx, "user", "u1", now)
	require.NoError(t, err)
	require.Empty(t, got)

	log, err := d.Audit(ctx, 0, 100)
	require.NoError(t, err)
	require.Len(t, log, 4) // create, set, set, clear: refusals write nothing
	require.Equal(t, "override/user/u1/orders", log[3].Target)
	require.Contains(t, string(log[2].Before), `"limit":5000`)
	require.Contains(t, string(log[3].Before), `"block":true`)

	// Deleting the rule deletes its overrides.
	_, err = d.SetOverride(ctx, "alice", o)
	require.NoError(t, err)
	_, err = d.Delete(ctx, "alice", "orders", "*")
	require.NoError(t, err)
	got, err = d.Overrides(ctx, "user", "u1", now)
	require.NoError(t, err)
	require.Empty(t, got)
}
