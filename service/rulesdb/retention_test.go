package rulesdb

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Pruning the audit keeps incremental loads exact and the revision going
// on: rows older than a Source's last load are pruned and its next load is
// still incremental; rows it has not loaded yet (a rule deleted, a tier
// cleared among them) are pruned and its next load sees the gap and is
// full, with the rule and the tier gone; the revision never moves back and
// nothing but audit rows is deleted.
func TestPruneAuditKeepsLoadsExact(t *testing.T) { each(t, testPruneAuditKeepsLoadsExact) }

func testPruneAuditKeepsLoadsExact(t *testing.T, dsn string) {
	ctx := tctx(t)
	clock := &fakeClock{t: time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)}
	w := open(t, dsn)
	w.now = clock.now
	r := open(t, dsn)
	src := r.Source(0)
	src.now = clock.now
	src.o.fullEvery, src.o.fullAfter = 1<<30, 1<<62
	counts := func() loadCounts {
		src.mu.Lock()
		defer src.mu.Unlock()
		return src.loads
	}
	requireAsFull := func(msg string) {
		t.Helper()
		got, err := src.Load(ctx)
		require.NoError(t, err, msg)
		want, _ := fullLoad(t, ctx, r, clock.now)
		requireSameSnapshot(t, want, got, msg)
	}
	for _, id := range []string{"a", "b", "c"} {
		rl := sample(id)
		rl.EndpointPattern = "/api/" + id
		_, err := w.Create(ctx, "t", rl)
		require.NoError(t, err)
	}
	_, err := w.SetTier(ctx, "t", "user", "alice", "gold")
	require.NoError(t, err)
	requireAsFull("first load")
	require.Equal(t, loadCounts{full: 1}, counts())

	// Two hours on: the rows loaded already are pruned; one written since
	// is kept, and the next load is incremental.
	clock.add(2 * time.Hour)
	_, err = w.Delete(ctx, "t", "c", "*")
	require.NoError(t, err)
	n, err := w.PruneAudit(ctx, clock.now().Add(-time.Hour))
	require.NoError(t, err)
	require.EqualValues(t, 4, n)
	requireAsFull("after a prune of rows older than the last load")
	require.Equal(t, loadCounts{full: 1, incremental: 1}, counts())

	// Rows the Source has not loaded are pruned too (a retention shorter
	// than its absence): the gap makes the load full, and the deleted rule
	// and the cleared tier are gone from it.
	revBefore := revisionOf(t, w)
	_, err = w.Delete(ctx, "t", "a", "*")
	require.NoError(t, err)
	_, err = w.SetTier(ctx, "t", "user", "alice", "")
	require.NoError(t, err)
	clock.add(time.Minute)
	n, err = w.PruneAudit(ctx, clock.now())
	require.NoError(t, err)
	require.EqualValues(t, 3, n, "every row is older than the cutoff")
	require.Equal(t, revBefore+2, revisionOf(t, w), "a prune moves no revision")
	requireAsFull("after a prune of rows not loaded yet")
	require.Equal(t, loadCounts{full: 2, incremental: 1}, counts())
	snap, err := src.Load(ctx)
	require.NoError(t, err)
	require.Len(t, snap.Rules(), 1, "only b is left")
	require.Empty(t, snap.TierOf("user", "alice"))

	// The next write takes the next revision, has its audit row, and is
	// loaded incrementally.
	saved, err := w.Update(ctx, "t", func() Rule { rl := sample("b"); rl.EndpointPattern = "/api/b"; rl.Limit = 7; return rl }(), "*")
	require.NoError(t, err)
	require.Equal(t, revBefore+3, saved.Revision)
	es, _, err := w.AuditQuery(ctx, AuditFilter{})
	require.NoError(t, err)
	require.Len(t, es, 1)
	require.Equal(t, saved.Revision, es[0].Revision)
	requireAsFull("a write after the prune")
	require.Equal(t, loadCounts{full: 2, incremental: 3}, counts())
}

func revisionOf(t *testing.T, d *DB) int64 {
	t.Helper()
	var rev int64
	require.NoError(t, d.db.QueryRowContext(tctx(t), `SELECT value FROM revision WHERE id = 1`).Scan(&rev))
	return rev
}

// Random writes with prunes of random cutoffs between them, on a clock
// that moves minutes at a time: every load equals a full load, whether it
// found the audit whole (incremental) or a gap (full).
func TestPruneAuditRandomLoadsEqualFull(t *testing.T) { each(t, testPruneAuditRandomLoadsEqualFull) }

func testPruneAuditRandomLoadsEqualFull(t *testing.T, dsn string) {
	ctx := tctx(t)
	clock := &fakeClock{t: time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)}
	w := open(t, dsn)
	w.now = clock.now
	r := open(t, dsn)
	src := r.Source(0)
	src.now = clock.now
	src.o.fullEvery, src.o.fullAfter = 1<<30, 1<<62
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 24))
	ids := []string{"a", "b", "c", "d"}
	callers := []string{"alice", "bob"}
	tiers := []string{"", "gold"}
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	_, err := src.Load(ctx)
	require.NoError(t, err)
	for step := range 120 {
		id := pick(ids)
		rl := sample(id)
		rl.EndpointPattern, rl.Limit = "/api/"+id, int64(1+rng.IntN(50))
		switch rng.IntN(4) {
		case 0:
			_, err = w.Create(ctx, "t", rl)
		case 1:
			_, err = w.Update(ctx, "t", rl, "*")
		case 2:
			_, err = w.Delete(ctx, "t", id, "*")
		case 3:
			_, err = w.SetTier(ctx, "t", "user", pick(callers), pick(tiers))
		}
		_ = err // refused writes (a rule that exists, or not) are part of the sequence
		clock.add(time.Duration(rng.IntN(10)) * time.Minute)
		if rng.IntN(4) == 0 {
			_, err := w.PruneAudit(ctx, clock.now().Add(-time.Duration(rng.IntN(30))*time.Minute))
			require.NoError(t, err)
		}
		if rng.IntN(2) == 0 {
			continue
		}
		msg := fmt.Sprintf("step %d, seed %d", step, seed)
		got, err := src.Load(ctx)
		require.NoError(t, err, msg)
		want, wantSt := fullLoad(t, ctx, r, clock.now)
		requireSameSnapshot(t, want, got, msg)
		src.mu.Lock()
		gotSt := src.base
		src.mu.Unlock()
		require.Equal(t, wantSt, gotSt, msg)
	}
	src.mu.Lock()
	t.Logf("loads: %d full, %d incremental", src.loads.full, src.loads.incremental)
	src.mu.Unlock()
}

// A prune deletes in batches until no row older than the cutoff is left,
// and keeps every newer row.
func TestPruneAuditBatches(t *testing.T) { each(t, testPruneAuditBatches) }

func testPruneAuditBatches(t *testing.T, dsn string) {
	ctx := tctx(t)
	d := open(t, dsn)
	old := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const stale, fresh = 2*pruneBatch + 17, 5
	tx, err := d.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	for i := 1; i <= stale+fresh; i++ {
		at := old
		if i > stale {
			at = old.Add(48 * time.Hour)
		}
		_, err := tx.ExecContext(ctx, d.q(`INSERT INTO audit (revision, at, actor, action, target) VALUES (?, ?, 't', 'tier.set', 'tier/user/x')`), i, at.UnixMilli())
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit())
	n, err := d.PruneAudit(ctx, old.Add(time.Hour))
	require.NoError(t, err)
	require.EqualValues(t, stale, n)
	var left, first int64
	require.NoError(t, d.db.QueryRowContext(ctx, `SELECT COUNT(*), MIN(revision) FROM audit`).Scan(&left, &first))
	require.EqualValues(t, fresh, left)
	require.EqualValues(t, stale+1, first)
	n, err = d.PruneAudit(ctx, old.Add(time.Hour))
	require.NoError(t, err)
	require.Zero(t, n, "nothing left to prune")
}
