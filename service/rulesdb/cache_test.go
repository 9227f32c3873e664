package rulesdb

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/internal/pgtest"
	"github.com/sluicehq/sluice/service/rules"
)

// deadDSN is a PostgreSQL DSN of a loopback port nothing listens on.
func deadDSN(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return "postgres://app:s3cret@" + addr + "/rules?sslmode=disable&connect_timeout=2"
}

// After each good load the rows are cached (mode 0600, atomically); a
// Source that cannot reach its database serves the cache, marked.
func TestCacheWrittenAndServed(t *testing.T) { each(t, testCacheWrittenAndServed) }

func testCacheWrittenAndServed(t *testing.T, dsn string) {
	ctx := tctx(t)
	d := open(t, dsn)
	_, err := d.Create(ctx, "alice", sample("orders"))
	require.NoError(t, err)
	_, err = d.SetTier(ctx, "alice", "user", "u1", "gold")
	require.NoError(t, err)
	gold := sample("orders-gold")
	gold.Tier, gold.Limit = "gold", 1000
	_, err = d.Create(ctx, "alice", gold)
	require.NoError(t, err)
	_, err = d.SetOverride(ctx, "alice", Override{Dimension: "user", Identifier: "u2", RuleID: "orders", Block: true, ExpiresAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)

	cache := filepath.Join(t.TempDir(), "rules.cache.json")
	live, err := d.Source(0, WithCache(cache)).Load(ctx)
	require.NoError(t, err)
	require.Equal(t, "4", live.Revision())
	fi, err := os.Stat(cache)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	var doc map[string]any
	b, err := os.ReadFile(cache)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &doc))
	require.EqualValues(t, 4, doc["revision"])
	require.Len(t, doc["rules"], 2)
	require.Len(t, doc["tiers"], 1)
	require.Len(t, doc["overrides"], 1)
	left, err := filepath.Glob(filepath.Join(filepath.Dir(cache), ".*.tmp"))
	require.NoError(t, err)
	require.Empty(t, left, "no temporary file left behind")

	// The database is unreachable: OpenSource serves the cache.
	src, err := OpenSource(ctx, deadDSN(t), 0, WithCache(cache))
	require.NoError(t, err)
	require.Nil(t, src.DB())
	snap, err := src.Load(ctx)
	require.NoError(t, err)
	require.Equal(t, "4"+CachedSuffix, snap.Revision())
	require.Equal(t, "gold", snap.TierOf("user", "u1"))
	require.EqualValues(t, 1000, snap.Match("", "user", "/api/orders/1")[0].Tiers["gold"].Rate)
	o, ok := snap.OverrideOf("orders", "user", "u2")
	require.True(t, ok)
	require.True(t, o.Blocks())

	// Without a cache, or with a corrupt one, an unreachable database is
	// an error (naming the file), never a panic.
	_, err = OpenSource(ctx, deadDSN(t), 0)
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cret")
	_, err = OpenSource(ctx, deadDSN(t), 0, WithCache(filepath.Join(t.TempDir(), "none.json")))
	require.ErrorContains(t, err, "none.json")
	for name, content := range map[string]string{
		"truncated": string(b[:len(b)/2]),
		"format":    `{"format": "other/9", "revision": 1}`,
		"null rule": `{"format": "sluice-rules-cache/1", "revision": 1, "rules": [null]}`,
		"invalid":   `{"format": "sluice-rules-cache/1", "revision": 1, "rules": [{"id": "x", "dimension": "user", "limit": 0, "window_seconds": 1, "algorithm": "gcra", "enabled": true}]}`,
	} {
		bad := filepath.Join(t.TempDir(), "bad.json")
		require.NoError(t, os.WriteFile(bad, []byte(content), 0o600))
		src, err := OpenSource(ctx, deadDSN(t), 0, WithCache(bad))
		if err == nil {
			_, err = src.Load(ctx)
		}
		require.ErrorContains(t, err, bad, name)
	}
}

// instance is one ratelimitd's worth of rules: an OpenSource with a cache
// and an engine on a memory store, following it.
type instance struct {
	src    *Source
	engine *engine.Engine
	stop   func()
}

func startInstance(t *testing.T, dsn, cache string) *instance {
	t.Helper()
	ctx := tctx(t)
	src, err := OpenSource(ctx, dsn, 50*time.Millisecond, WithCache(cache))
	require.NoError(t, err)
	st, err := memorystore.New()
	require.NoError(t, err)
	e, err := engine.New(ctx, st, src, engine.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = e.Run(rctx) })
	in := &instance{src: src, engine: e}
	var once sync.Once
	in.stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			if d := src.DB(); d != nil {
				_ = d.Close()
			}
			_ = st.Close()
		})
	}
	t.Cleanup(in.stop)
	return in
}

// allowedOf makes n checks of user u on /api/orders/1 and counts the
// allowed ones.
func (in *instance) allowedOf(t *testing.T, u string, n int) int {
	t.Helper()
	ok := 0
	for range n {
		r, err := in.engine.Check(tctx(t), engine.Check{Dimension: "user", Identifier: u, Endpoint: "/api/orders/1", Cost: 1})
		require.NoError(t, err)
		if r.Allowed {
			ok++
		}
	}
	return ok
}

// An instance killed and restarted while the database is down starts from
// its cache and decides under the cached rules; when the database comes
// back it connects, migrates, reloads fully and catches up.
func TestInstanceRestartsFromCacheWhileDBDown(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := tctx(t)
	admin := open(t, srv.DSN())
	r := sample("orders")
	r.Limit, r.WindowSeconds, r.Algorithm = 3, 3600, "fixed_window"
	_, err := admin.Create(ctx, "alice", r)
	require.NoError(t, err)
	cache := filepath.Join(t.TempDir(), "cache.json")

	one := startInstance(t, srv.DSN(), cache)
	require.Equal(t, "1", one.engine.Snapshot().Revision())
	require.Equal(t, 3, one.allowedOf(t, "ann", 5))
	one.stop() // the instance is killed...
	srv.Kill() // ...and the database is down when it restarts

	two := startInstance(t, srv.DSN(), cache)
	require.Nil(t, two.src.DB())
	require.Equal(t, "1"+CachedSuffix, two.engine.Snapshot().Revision())
	require.Equal(t, 3, two.allowedOf(t, "bob", 5), "the cached rules decide: 3 per hour")

	srv.Restart(t)
	upd := r
	upd.Limit = 5
	require.Eventually(t, func() bool {
		_, err := admin.Update(ctx, "alice", upd, "*")
		return err == nil
	}, 10*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool {
		return two.engine.Snapshot().Revision() == "2"
	}, 15*time.Second, 20*time.Millisecond, "the instance catches up once the database is back")
	require.NotNil(t, two.src.DB())
	require.Equal(t, 5, two.allowedOf(t, "carol", 7))
}

// The snapshot carries the overrides in force at load: expired ones are
// left out, and one that no longer fits its rule (a tier row) is left out
// without making the rule set invalid.
func TestSnapshotOverrides(t *testing.T) { each(t, testSnapshotOverrides) }

func testSnapshotOverrides(t *testing.T, dsn string) {
	ctx := tctx(t)
	d := open(t, dsn)
	now := time.Now()
	_, err := d.Create(ctx, "alice", sample("orders"))
	require.NoError(t, err)
	gold := sample("orders-gold")
	gold.Tier, gold.Limit = "gold", 1000
	_, err = d.Create(ctx, "alice", gold)
	require.NoError(t, err)
	_, err = d.SetOverride(ctx, "a", Override{Dimension: "user", Identifier: "u1", RuleID: "orders", Limit: 5, WindowSeconds: 10, ExpiresAt: now.Add(time.Hour)})
	require.NoError(t, err)
	_, err = d.SetOverride(ctx, "a", Override{Dimension: "user", Identifier: "u2", RuleID: "orders", Block: true, ExpiresAt: now.Add(time.Hour)})
	require.NoError(t, err)
	_, err = d.SetOverride(ctx, "a", Override{Dimension: "user", Identifier: "u3", RuleID: "orders", Block: true, ExpiresAt: now.Add(time.Hour)})
	require.NoError(t, err)
	_, err = d.SetOverride(ctx, "a", Override{Dimension: "user", Identifier: "u4", RuleID: "orders-gold", Block: true, ExpiresAt: now.Add(time.Hour)})
	require.NoError(t, err)
	// u3's lapses: written with a past expiry behind the store's back.
	_, err = d.db.ExecContext(ctx, d.q(`UPDATE overrides SET expires_at = ? WHERE identifier = 'u3'`), now.Add(-time.Second).UnixMilli())
	require.NoError(t, err)

	snap, err := d.Source(0).Load(ctx)
	require.NoError(t, err)
	require.Len(t, snap.Overrides(), 2)
	o, ok := snap.OverrideOf("orders", "user", "u1")
	require.True(t, ok)
	require.False(t, o.Blocks())
	require.EqualValues(t, 5, o.Limit.Rate)
	require.Equal(t, 10*time.Second, o.Limit.Period)
	require.Equal(t, snap.Rules()[0].Limit.Algorithm, o.Limit.Algorithm, "the rule's algorithm")
	require.Equal(t, now.Add(time.Hour).UnixMilli(), o.Until.UnixMilli())
	require.NotZero(t, o.Revision)
	o, ok = snap.OverrideOf("orders", "user", "u2")
	require.True(t, ok)
	require.True(t, o.Blocks())
	_, ok = snap.OverrideOf("orders", "user", "u3")
	require.False(t, ok, "expired at load")
	_, ok = snap.OverrideOf("orders-gold", "user", "u4")
	require.False(t, ok, "a tier row is not a served rule")
}

var _ rules.Source = (*Source)(nil)
