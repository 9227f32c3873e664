package attack

import (
	"context"
	"database/sql"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// TestAttackPropagationListenerKilled: a change written through instance
// A is in force on instance B within 1 s even when B's connections to
// PostgreSQL (its LISTEN connection, and its pool: all of them) are
// terminated by the server just before the write, so the notification is
// lost and the first poll fails: the poll and the reload after the
// reconnect must catch it. 8 rounds, each within 1 s.
func TestAttackPropagationListenerKilled(t *testing.T) {
	dsn := pg.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, err := rulesdb.Open(ctx, dsn)
	require.NoError(t, err)
	defer func() { _ = a.Close() }()
	r, err := a.Create(ctx, "ops", rulesdb.Rule{ID: "api", Name: "api", Dimension: "user", Limit: 100, WindowSeconds: 60, Algorithm: "fixed_window", Enabled: true})
	require.NoError(t, err)

	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	bDSN := dsn + sep + "application_name=instance_b"
	b, err := rulesdb.Open(ctx, bDSN)
	require.NoError(t, err)
	defer func() { _ = b.Close() }()
	e, err := engine.New(ctx, memStore(t), b.Source(0), engine.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = e.Run(runCtx) }()
	defer func() { stop(); <-done }()

	admin, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	defer func() { _ = admin.Close() }()
	// B's listener is up once its connection is seen LISTENing.
	listening := func() bool {
		var n int
		_ = admin.QueryRowContext(ctx, `SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = 'instance_b' AND query ILIKE 'listen%'`).Scan(&n)
		return n > 0
	}
	require.Eventually(t, listening, 10*time.Second, 20*time.Millisecond)

	var worst time.Duration
	for round := range 8 {
		var killed int
		require.NoError(t, admin.QueryRowContext(ctx,
			`SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'instance_b'`).Scan(&killed))
		require.Positive(t, killed)
		r.Limit = int64(200 + round)
		r, err = a.Update(ctx, "ops", *r, r.ETag)
		require.NoError(t, err)
		start := time.Now()
		want := strconv.FormatInt(r.Revision, 10)
		require.Eventually(t, func() bool { return e.Snapshot().Revision() == want }, 3*time.Second, 2*time.Millisecond,
			"round %d: revision %s never reached B", round, want)
		took := time.Since(start)
		worst = max(worst, took)
		require.Less(t, took, time.Second, "round %d: B took %s", round, took)
		// Each round kills a listening connection: B's is back first.
		require.Eventually(t, listening, 10*time.Second, 20*time.Millisecond, "round %d: B never listened again", round)
	}
	t.Logf("worst propagation with B's connections killed: %s", worst)
}
