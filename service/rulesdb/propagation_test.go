package rulesdb

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/internal/pgtest"
	"github.com/sluicehq/sluice/service/rules"
)

// watcher runs src.Watch in the background; its channels are what Watch
// applied and reported.
type watcher struct {
	applied chan *rules.Snapshot
	errs    chan error
}

func startWatch(t *testing.T, src *Source) *watcher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{applied: make(chan *rules.Snapshot, 256), errs: make(chan error, 256)}
	var wg sync.WaitGroup
	wg.Go(func() {
		require.NoError(t, src.Watch(ctx, func(s *rules.Snapshot) error { w.applied <- s; return nil }, func(err error) { w.errs <- err }))
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	return w
}

// next waits up to d for the next applied snapshot, failing on a reported
// error unless errsOK.
func (w *watcher) next(t *testing.T, d time.Duration, errsOK bool) *rules.Snapshot {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case s := <-w.applied:
			return s
		case err := <-w.errs:
			if !errsOK {
				t.Fatalf("unexpected error: %v", err)
			}
			t.Logf("reported (expected while the database is down): %v", err)
		case <-deadline:
			t.Fatalf("no snapshot applied within %v", d)
		}
	}
}

// Two instances (two handles, each with its Source) on PostgreSQL: a change
// written through one is applied by the other within 1 s, by NOTIFY: the
// poll is set to 30 s so that only the notification can deliver it.
func TestPropagationPostgresNotify(t *testing.T) {
	ctx := tctx(t)
	dsn := pg.NewDatabase(t)
	a, b := open(t, dsn), open(t, dsn)
	srcB := b.Source(30 * time.Second)
	_, err := srcB.Load(ctx)
	require.NoError(t, err)
	w := startWatch(t, srcB)
	// The listener is up once the first notified change arrives; give it
	// a first change before measuring.
	r, err := a.Create(ctx, "alice", sample("orders"))
	require.NoError(t, err)
	require.Equal(t, "1", w.next(t, 5*time.Second, false).Revision())

	const changes = 50
	took := make([]time.Duration, 0, changes)
	for i := range changes {
		next := sample("orders")
		next.Limit = int64(200 + i)
		start := time.Now()
		r, err = a.Update(ctx, "alice", next, r.ETag)
		require.NoError(t, err)
		s := w.next(t, 2*time.Second, false)
		d := time.Since(start)
		require.Equal(t, strconv.FormatInt(r.Revision, 10), s.Revision())
		require.EqualValues(t, 200+i, s.Rules()[0].Limit.Rate)
		require.Less(t, d, time.Second, "change %d", i)
		took = append(took, d)
	}
	slices.Sort(took)
	t.Logf("propagation over %d changes on PostgreSQL (write commit to snapshot applied on the other handle, poll 30s): p50 %v, p90 %v, max %v",
		changes, took[changes/2], took[changes*9/10], took[changes-1])
}

// A broken row written by hand (not through the store) with its
// notification: reported at once, nothing applied, the last good snapshot
// stays; fixed, it is applied.
func TestPostgresBrokenRowKeepsLastGood(t *testing.T) {
	ctx := tctx(t)
	dsn := pg.NewDatabase(t)
	a, b := open(t, dsn), open(t, dsn)
	_, err := a.Create(ctx, "alice", sample("orders"))
	require.NoError(t, err)
	src := b.Source(30 * time.Second)
	_, err = src.Load(ctx)
	require.NoError(t, err)
	w := startWatch(t, src)
	// The listener must be up before the hand-written notification.
	_, err = a.SetTier(ctx, "alice", "user", "u1", "gold")
	require.NoError(t, err)
	w.next(t, 5*time.Second, false)

	hand := func(stmt string) {
		tx, err := a.db.BeginTx(ctx, nil)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback() }()
		_, err = tx.ExecContext(ctx, stmt)
		require.NoError(t, err)
		var rev int64
		require.NoError(t, tx.QueryRowContext(ctx, `UPDATE revision SET value = value + 1 RETURNING value`).Scan(&rev))
		_, err = tx.ExecContext(ctx, `SELECT pg_notify($1, $2)`, NotifyChannel, strconv.FormatInt(rev, 10))
		require.NoError(t, err)
		require.NoError(t, tx.Commit())
	}
	hand(`INSERT INTO rules (id, name, dimension, endpoint_pattern, "limit", window_seconds, algorithm, revision, created_at, updated_at)
		VALUES ('bad', 'bad', 'ip', '', 5, 60, 'magic', 0, 0, 0)`)
	select {
	case err := <-w.errs:
		require.ErrorIs(t, err, ErrInvalid)
		require.ErrorContains(t, err, "algorithm")
	case s := <-w.applied:
		t.Fatalf("applied a broken set at revision %s", s.Revision())
	case <-time.After(time.Second):
		t.Fatal("the broken row was not reported within 1s")
	}
	hand(`UPDATE rules SET algorithm = 'gcra' WHERE id = 'bad'`)
	s := w.next(t, time.Second, false)
	require.Equal(t, "4", s.Revision())
	require.Len(t, s.Rules(), 2)
}

// PostgreSQL killed under a running Watch: the failure is reported (no
// panic, nothing applied), and once it is back the listener reconnects and
// reloads fully, so a change made after the restart arrives although the
// poll (30 s) never runs.
func TestPostgresKilledAndRestartedUnderWatch(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := tctx(t)
	a, b := open(t, srv.DSN()), open(t, srv.DSN())
	_, err := a.Create(ctx, "alice", sample("orders"))
	require.NoError(t, err)
	src := b.Source(30 * time.Second)
	first, err := src.Load(ctx)
	require.NoError(t, err)
	w := startWatch(t, src)
	_, err = a.SetTier(ctx, "alice", "user", "u1", "gold")
	require.NoError(t, err)
	w.next(t, 5*time.Second, false) // the listener is up

	srv.Kill()
	select {
	case err := <-w.errs:
		require.ErrorContains(t, err, "listen")
		t.Logf("reported: %v", err)
	case s := <-w.applied:
		t.Fatalf("applied %s while the database was down", s.Revision())
	case <-time.After(5 * time.Second):
		t.Fatal("the lost database was not reported within 5s")
	}
	require.Equal(t, "1", first.Revision())

	srv.Restart(t)
	upd := sample("orders")
	upd.Limit = 777
	// The pool's connections died with the server: the first attempts
	// may fail before database/sql dials anew.
	require.Eventually(t, func() bool {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := a.Update(wctx, "alice", upd, "*")
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "writes never worked again")
	deadline := time.After(10 * time.Second)
	for {
		select {
		case s := <-w.applied:
			if len(s.Rules()) == 1 && s.Rules()[0].Limit.Rate == 777 {
				return
			}
		case err := <-w.errs:
			t.Logf("reported while reconnecting: %v", err)
		case <-deadline:
			t.Fatal("the change made after the restart did not arrive within 10s")
		}
	}
}

// A database restored from an older backup has a lower revision: the next
// write's notification (a revision other than the one in force) is loaded
// at once, although it is not newer.
func TestPostgresRestoredOlderRevision(t *testing.T) {
	ctx := tctx(t)
	dsn := pg.NewDatabase(t)
	a, b := open(t, dsn), open(t, dsn)
	for _, id := range []string{"r1", "r2", "r3"} {
		r := sample(id)
		r.EndpointPattern = "/" + id
		_, err := a.Create(ctx, "alice", r)
		require.NoError(t, err)
	}
	src := b.Source(30 * time.Second)
	_, err := src.Load(ctx)
	require.NoError(t, err)
	w := startWatch(t, src)
	_, err = a.SetTier(ctx, "alice", "user", "u1", "gold")
	require.NoError(t, err)
	require.Equal(t, "4", w.next(t, 5*time.Second, false).Revision())

	// "Restore": the revision counter and the audit go back (no
	// notification).
	_, err = a.db.ExecContext(ctx, `UPDATE revision SET value = 1`)
	require.NoError(t, err)
	_, err = a.db.ExecContext(ctx, `DELETE FROM audit WHERE revision > 1`)
	require.NoError(t, err)
	_, err = a.Delete(ctx, "alice", "r3", "*")
	require.NoError(t, err)
	s := w.next(t, time.Second, false)
	require.Equal(t, "2", s.Revision())
	require.Len(t, s.Rules(), 2)
}
