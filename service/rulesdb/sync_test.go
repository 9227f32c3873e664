package rulesdb

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/rules"
)

// inForce is an apply function standing for an engine: the revision it
// last put in force, refusing any snapshot while refuse is set.
type inForce struct {
	rev    atomic.Value // string
	refuse atomic.Bool
	calls  atomic.Int64
}

func (f *inForce) apply(s *rules.Snapshot) error {
	f.calls.Add(1)
	if f.refuse.Load() {
		return errors.New("engine: refused for the test")
	}
	f.rev.Store(s.Revision())
	return nil
}

func (f *inForce) revision() string { v, _ := f.rev.Load().(string); return v }

// runWatch runs src.Watch with f's apply until the test ends.
func runWatch(t *testing.T, src *Source, f *inForce) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { require.NoError(t, src.Watch(ctx, f.apply, func(error) {})) })
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// Sync returns only once the revision a write committed is in force, with
// an hour's poll (so only Sync's own load can bring it), for each kind of
// write; concurrent writers each find their revision (or a later one) in
// force when Sync returns.
func TestSyncPutsEachWriteInForce(t *testing.T) { each(t, testSyncPutsEachWriteInForce) }

func testSyncPutsEachWriteInForce(t *testing.T, dsn string) {
	ctx := tctx(t)
	d := open(t, dsn)
	src := d.Source(time.Hour)
	first, err := src.Load(ctx)
	require.NoError(t, err)
	f := &inForce{}
	f.rev.Store(first.Revision())
	runWatch(t, src, f)

	atLeast := func(rev int64) {
		t.Helper()
		require.NoError(t, src.Sync(ctx, rev))
		got, err := strconv.ParseInt(f.revision(), 10, 64)
		require.NoError(t, err)
		require.GreaterOrEqual(t, got, rev, "Sync returned before revision %d was in force", rev)
		require.Equal(t, got, src.InForce())
	}
	r, err := d.Create(ctx, "alice", sample("orders"))
	require.NoError(t, err)
	atLeast(r.Revision)
	r.Limit = 7
	r, err = d.Update(ctx, "alice", *r, r.ETag)
	require.NoError(t, err)
	atLeast(r.Revision)
	rev, err := d.SetTier(ctx, "alice", "user", "u1", "gold")
	require.NoError(t, err)
	atLeast(rev)
	again, err := d.SetTier(ctx, "alice", "user", "u1", "gold")
	require.NoError(t, err)
	require.Equal(t, rev, again, "no change: the revision it holds from")
	atLeast(again)
	rev, err = d.SetOverride(ctx, "alice", Override{Dimension: "user", Identifier: "u2", RuleID: "orders", Block: true, ExpiresAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	atLeast(rev)
	rev, err = d.ClearOverride(ctx, "alice", "user", "u2", "orders")
	require.NoError(t, err)
	atLeast(rev)
	rev, err = d.Delete(ctx, "alice", "orders", "*")
	require.NoError(t, err)
	atLeast(rev)

	// Concurrent writers, each waiting for its own revision.
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			r := sample("w" + strconv.Itoa(i))
			r.EndpointPattern = "/w/" + strconv.Itoa(i)
			w, err := d.Create(ctx, "w", r)
			if err == nil {
				err = src.Sync(ctx, w.Revision)
			}
			if err == nil && src.InForce() < w.Revision {
				err = errors.New("Sync returned before its revision was in force")
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// A revision the apply function refuses (the engine), or one whose rule
// set is invalid (a hand edit), is a NotInForceError, Refused, naming the
// revision still in force, at once rather than at the bound; the next
// good change is in force again.
func TestSyncRefused(t *testing.T) { each(t, testSyncRefused) }

func testSyncRefused(t *testing.T, dsn string) {
	ctx := tctx(t)
	d := open(t, dsn)
	r, err := d.Create(ctx, "alice", sample("orders"))
	require.NoError(t, err)
	src := d.Source(time.Hour)
	_, err = src.Load(ctx)
	require.NoError(t, err)
	f := &inForce{}
	runWatch(t, src, f)

	f.refuse.Store(true)
	r.Limit = 3
	r, err = d.Update(ctx, "alice", *r, r.ETag)
	require.NoError(t, err)
	start := time.Now()
	err = src.Sync(ctx, r.Revision)
	var nf *NotInForceError
	require.ErrorAs(t, err, &nf)
	require.True(t, nf.Refused)
	require.Equal(t, r.Revision, nf.Revision)
	require.EqualValues(t, 1, nf.InForce, "the revision before stays in force")
	require.ErrorContains(t, err, "refused for the test")
	require.Less(t, time.Since(start), d.Timeout(), "a refusal is told at once")

	f.refuse.Store(false)
	// A hand edit makes the stored set invalid: a second base rule for the
	// same dimension and pattern, written around the store's checks (a
	// revision without an audit row: the next load is full).
	var handRev int64
	require.NoError(t, d.db.QueryRowContext(ctx, `UPDATE revision SET value = value + 1 WHERE id = 1 RETURNING value`).Scan(&handRev))
	_, err = d.db.ExecContext(ctx, d.q(`INSERT INTO rules (`+ruleCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		"twin", "twin", "user", r.EndpointPattern, 5, 60, "fixed_window", "", 0, false, true, handRev, 0, 0)
	require.NoError(t, err)
	rev, err := d.SetTier(ctx, "alice", "user", "u1", "gold")
	require.NoError(t, err)
	err = src.Sync(ctx, rev)
	require.ErrorAs(t, err, &nf)
	require.True(t, nf.Refused)
	require.ErrorIs(t, err, ErrInvalid)
	require.EqualValues(t, 1, nf.InForce)

	_, err = d.db.ExecContext(ctx, `DELETE FROM rules WHERE id = 'twin'`)
	require.NoError(t, err)
	rev, err = d.SetTier(ctx, "alice", "user", "u2", "gold")
	require.NoError(t, err)
	require.NoError(t, src.Sync(ctx, rev))
	require.Equal(t, strconv.FormatInt(rev, 10), f.revision())
}

// Without a Watch to load it, Sync waits its bound (the database's
// timeout), then says the revision is not in force yet.
func TestSyncBounded(t *testing.T) {
	ctx := tctx(t)
	d, err := Open(ctx, "file:"+t.TempDir()+"/rules.db", WithTimeout(200*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	src := d.Source(time.Hour)
	_, err = src.Load(ctx)
	require.NoError(t, err)
	r, err := d.Create(ctx, "alice", sample("orders"))
	require.NoError(t, err)
	start := time.Now()
	err = src.Sync(ctx, r.Revision)
	took := time.Since(start)
	var nf *NotInForceError
	require.ErrorAs(t, err, &nf)
	require.False(t, nf.Refused)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Zero(t, nf.InForce)
	require.GreaterOrEqual(t, took, 200*time.Millisecond)
	require.Less(t, took, 2*time.Second)
}
