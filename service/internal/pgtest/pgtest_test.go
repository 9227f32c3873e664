//go:build unix

package pgtest_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/internal/pgtest"
)

// TestServerKillRestart starts a server, writes a row, kills the server
// with SIGKILL, checks that connecting then fails, restarts it and checks
// that the row survived crash recovery and a new connection works.
func TestServerKillRestart(t *testing.T) {
	t.Parallel()
	start := time.Now()
	srv := pgtest.Start(t)
	t.Logf("start (initdb, postgres, create database): %v", time.Since(start))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	conn, err := pgx.Connect(ctx, srv.DSN())
	require.NoError(t, err)
	var db string
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_database()").Scan(&db))
	require.Equal(t, pgtest.Database, db)
	_, err = conn.Exec(ctx, "CREATE TABLE rules (id int PRIMARY KEY, name text NOT NULL)")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "INSERT INTO rules VALUES ($1, $2)", 1, "login")
	require.NoError(t, err)
	// No checkpoint: the committed row is only in the WAL, so the restart
	// must replay it (crash recovery).

	killed := time.Now()
	srv.Kill()
	require.False(t, srv.Running())
	t.Logf("kill: %v", time.Since(killed))
	require.Error(t, conn.Ping(ctx), "the old connection must be broken after the kill")
	_ = conn.Close(ctx)
	shortCtx, shortCancel := context.WithTimeout(ctx, 3*time.Second)
	_, err = pgx.Connect(shortCtx, srv.DSN())
	shortCancel()
	require.Error(t, err, "connecting to a killed server must fail")

	restarted := time.Now()
	srv.Restart(t)
	require.True(t, srv.Running())
	t.Logf("restart (crash recovery): %v", time.Since(restarted))

	conn, err = pgx.Connect(ctx, srv.DSN())
	require.NoError(t, err)
	defer func() { _ = conn.Close(context.Background()) }()
	var name string
	require.NoError(t, conn.QueryRow(ctx, "SELECT name FROM rules WHERE id = $1", 1).Scan(&name))
	require.Equal(t, "login", name)
}

// TestListenNotify checks a LISTEN/NOTIFY round trip between two
// connections, the mechanism a database rule source uses to learn of
// changes.
func TestListenNotify(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	listener, err := pgx.Connect(ctx, srv.DSN())
	require.NoError(t, err)
	defer func() { _ = listener.Close(context.Background()) }()
	_, err = listener.Exec(ctx, "LISTEN sluice_rules")
	require.NoError(t, err)

	notifier, err := pgx.Connect(ctx, srv.DSN())
	require.NoError(t, err)
	defer func() { _ = notifier.Close(context.Background()) }()
	_, err = notifier.Exec(ctx, "SELECT pg_notify('sluice_rules', $1)", "revision 7")
	require.NoError(t, err)

	waitCtx, waitCancel := context.WithTimeout(ctx, 5*time.Second)
	defer waitCancel()
	n, err := listener.WaitForNotification(waitCtx)
	require.NoError(t, err)
	require.Equal(t, "sluice_rules", n.Channel)
	require.Equal(t, "revision 7", n.Payload)
	require.Equal(t, notifier.PgConn().PID(), n.PID)

	// A notification on a channel nobody listens to is not delivered.
	_, err = notifier.Exec(ctx, "NOTIFY other_channel, 'x'")
	require.NoError(t, err)
	quiet, quietCancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer quietCancel()
	_, err = listener.WaitForNotification(quiet)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// TestShared gives each test a database of its own on one server: two
// databases are distinct and usable, and a database is dropped with its
// test.
func TestShared(t *testing.T) {
	t.Parallel()
	sh := pgtest.StartShared()
	t.Cleanup(sh.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var first string
	t.Run("a", func(t *testing.T) {
		first = sh.NewDatabase(t)
		conn, err := pgx.Connect(ctx, first)
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "CREATE TABLE only_in_a (id int)")
		require.NoError(t, err)
	})
	second := sh.NewDatabase(t)
	require.NotEqual(t, first, second)
	conn, err := pgx.Connect(ctx, second)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, "SELECT COUNT(*) FROM pg_tables WHERE tablename = 'only_in_a'").Scan(&n))
	require.Zero(t, n, "databases are separate")
	_, err = pgx.Connect(ctx, first)
	require.Error(t, err, "the first test's database was dropped at its end")
}

// TestLaunchStop: a server started without a test (Launch) serves its
// database until Stop, which leaves no postmaster behind.
func TestLaunchStop(t *testing.T) {
	t.Parallel()
	// A directory of our own in the system's temporary directory (as
	// Shared makes): t.TempDir's parent is closed to the server's user.
	dir, err := os.MkdirTemp("", "pgtest-launch-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	srv, err := pgtest.Launch(filepath.Join(dir, "pg"))
	if err != nil && !pgtest.Required() {
		t.Skipf("PostgreSQL unavailable: %v", err)
	}
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.DSN())
	require.NoError(t, err)
	var one int
	require.NoError(t, conn.QueryRow(ctx, "SELECT 1").Scan(&one))
	require.Equal(t, 1, one)
	require.NoError(t, conn.Close(ctx))
	pid := srv.Pid()
	require.True(t, srv.Running())
	srv.Stop()
	require.False(t, srv.Running())
	require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "the postmaster must be gone after Stop")
}
