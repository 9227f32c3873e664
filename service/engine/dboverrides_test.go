package engine_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// Overrides written to the rules database reach two instances (two
// engines, each following its own Source of one SQLite file) on one
// Redis: the override is in force on both within a second, counted once
// across them, and its clear ends it on both.
func TestOverridesFromTheDatabase(t *testing.T) {
	ctx := context.Background()
	dsn := "file:" + filepath.Join(t.TempDir(), "rules.db")
	db, err := rulesdb.Open(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	_, err = db.Create(ctx, "test", rulesdb.Rule{ID: "orders", Name: "orders", Dimension: "user", EndpointPattern: "/orders", Limit: 3, WindowSeconds: 3600, Algorithm: "fixed_window", Enabled: true})
	require.NoError(t, err)
	addr := redistest.StartServer(t).Addr
	quiet := engine.WithLogger(slog.New(slog.DiscardHandler))

	var es [2]*engine.Engine
	for i := range es {
		h, err := rulesdb.Open(ctx, dsn)
		require.NoError(t, err)
		t.Cleanup(func() { h.Close() })
		store := redisStore(t, addr)
		if i == 1 { // redisStore flushes: the second instance shares the first's data
			store = redisStoreNoFlush(t, addr)
		}
		e, err := engine.New(ctx, store, h.Source(50*time.Millisecond), quiet)
		require.NoError(t, err)
		running(t, e)
		es[i] = e
	}
	limitOn := func(e *engine.Engine) int64 {
		r := mustCheck(t, e, engine.Check{Dimension: "user", Identifier: "ann", Endpoint: "/orders"})
		return r.Limit
	}
	require.EqualValues(t, 3, limitOn(es[0]))

	_, err = db.SetOverride(ctx, "test", rulesdb.Override{Dimension: "user", Identifier: "ann", RuleID: "orders", Limit: 10, WindowSeconds: 3600, ExpiresAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	for _, e := range es {
		require.Eventually(t, func() bool {
			_, ok := e.Snapshot().OverrideOf("orders", "user", "ann")
			return ok && limitOn(e) == 10
		}, time.Second, 10*time.Millisecond, "the override is in force on every instance within 1 s")
	}
	// Counted once across the instances.
	spend(t, es[0], order("ann"), 6)
	spend(t, es[1], order("ann"), 4)
	require.False(t, mustCheck(t, es[0], order("ann")).Allowed)
	us, err := es[1].Usage(ctx, "user", "ann")
	require.NoError(t, err)
	require.EqualValues(t, 10, us[0].Used)
	require.NotNil(t, us[0].Override)

	// Another write (a tier elsewhere) makes a new snapshot with the same
	// override: nothing reset.
	_, err = db.SetTier(ctx, "test", "user", "bob", "gold")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return es[0].Snapshot().TierOf("user", "bob") == "gold" && es[1].Snapshot().TierOf("user", "bob") == "gold"
	}, time.Second, 10*time.Millisecond)
	require.False(t, mustCheck(t, es[1], order("ann")).Allowed, "a new snapshot reset the override's count")

	// A block, then its clear.
	_, err = db.SetOverride(ctx, "test", rulesdb.Override{Dimension: "user", Identifier: "ann", RuleID: "orders", Block: true, ExpiresAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	for _, e := range es {
		require.Eventually(t, func() bool {
			us, err := e.Usage(ctx, "user", "ann")
			require.NoError(t, err)
			return us[0].Blocked && us[0].State == core.Throttled
		}, time.Second, 10*time.Millisecond)
	}
	_, err = db.ClearOverride(ctx, "test", "user", "ann", "orders")
	require.NoError(t, err)
	for _, e := range es {
		// (A blocked caller's capacity is the rule's: ask for an
		// admission, peeked.)
		require.Eventually(t, func() bool {
			r := mustCheck(t, e, engine.Check{Dimension: "user", Identifier: "ann", Endpoint: "/orders"})
			return r.Allowed && r.Limit == 3
		}, time.Second, 10*time.Millisecond, "cleared on every instance within 1 s")
	}
	r := mustCheck(t, es[1], order("ann"))
	require.True(t, r.Allowed, "ann's own count under the rule is untouched: %+v", r)
}

// redisStoreNoFlush is a Redis store on addr that keeps what is there.
func redisStoreNoFlush(t *testing.T, addr string) core.Store {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	s, err := redisstore.New(c, redisstore.WithTimeout(5*time.Second))
	require.NoError(t, err)
	return s
}
