package rulesdb

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/rules"
)

// fakeClock is a clock tests move by hand, shared by a writer and sources.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// fullLoad is a full load of d at now: the state and snapshot an
// incremental load must equal.
func fullLoad(t *testing.T, ctx context.Context, d *DB, now func() time.Time) (*rules.Snapshot, *state) {
	t.Helper()
	s := d.Source(0)
	s.now = now
	snap, st, err := s.loadDB(ctx, d, true)
	require.NoError(t, err)
	return snap, st
}

// requireSameSnapshot checks that two snapshots serve the same rules,
// tiers and overrides.
func requireSameSnapshot(t *testing.T, want, got *rules.Snapshot, msg string) {
	t.Helper()
	require.Equal(t, want.Revision(), got.Revision(), msg)
	require.Equal(t, len(want.Rules()), len(got.Rules()), msg)
	for i, w := range want.Rules() {
		g := got.Rules()[i]
		require.Equal(t, w.ID, g.ID, msg)
		require.Equal(t, w.Dimension, g.Dimension, msg)
		require.Equal(t, w.Endpoints, g.Endpoints, msg)
		require.Equal(t, w.Limit, g.Limit, msg)
		require.Equal(t, w.Tiers, g.Tiers, msg)
		require.Equal(t, w.Shadow, g.Shadow, msg)
	}
	require.Equal(t, want.Overrides(), got.Overrides(), msg)
}

// The property of incremental loads: after any sequence of writes
// (creates, updates, deletes, tiers set and cleared, overrides set and
// cleared, imports; many refused), with loads after every write or only
// after several, the incremental load of a second handle gives the state
// and snapshot of a full load, overrides lapsing with the clock included.
func TestIncrementalLoadEqualsFull(t *testing.T) { each(t, testIncrementalLoadEqualsFull) }

func testIncrementalLoadEqualsFull(t *testing.T, dsn string) {
	ctx := tctx(t)
	clock := &fakeClock{t: time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)}
	w := open(t, dsn)
	w.now = clock.now
	r := open(t, dsn)
	src := r.Source(0)
	src.now = clock.now
	src.o.fullEvery, src.o.fullAfter = 1<<30, 1<<62 // only the incremental path, unless it must fall back

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 15))
	dims := []string{"user", "ip"}
	eps := []string{"", "/api/a/**", "/api/b"}
	tiers := []string{"", "", "gold", "silver"}
	algos := []string{"token_bucket", "fixed_window", "gcra"}
	ids := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	callers := []string{"alice", "bob", "x/y"}
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	randRule := func() Rule {
		return Rule{ID: pick(ids), Name: "n", Dimension: pick(dims), EndpointPattern: pick(eps), Limit: int64(1 + rng.IntN(100)),
			WindowSeconds: int64(1 + rng.IntN(60)), Algorithm: pick(algos), Tier: pick(tiers), Shadow: rng.IntN(4) == 0, Enabled: rng.IntN(5) > 0}
	}
	// The first load is full; so is one with no state.
	_, err := src.Load(ctx)
	require.NoError(t, err)

	const steps = 220
	written, loads := 0, 0
	var set []Override
	for step := range steps {
		var err error
		op := rng.IntN(11)
		switch op {
		case 0, 1:
			_, err = w.Create(ctx, "t", randRule())
		case 2, 3:
			_, err = w.Update(ctx, "t", randRule(), "*")
		case 4:
			_, err = w.Delete(ctx, "t", pick(ids), "*")
		case 5, 6:
			_, err = w.SetTier(ctx, "t", pick(dims), pick(callers), pick(tiers))
		case 7, 8:
			o := Override{Dimension: pick(dims), Identifier: pick(callers), RuleID: pick(ids), Limit: int64(1 + rng.IntN(9)), WindowSeconds: 10,
				ExpiresAt: clock.now().Add(time.Duration(1+rng.IntN(20)) * time.Minute)}
			if rng.IntN(2) == 0 { // short: often set again with an earlier expiry that lapses before a load
				o.ExpiresAt = clock.now().Add(time.Duration(1+rng.IntN(30)) * time.Second)
			}
			if rng.IntN(3) == 0 {
				o.Limit, o.WindowSeconds, o.Block = 0, 0, true
			}
			if _, err = w.SetOverride(ctx, "t", o); err == nil {
				set = append(set, o)
			}
		case 9:
			o := Override{Dimension: pick(dims), Identifier: pick(callers), RuleID: pick(ids)}
			if len(set) > 0 && rng.IntN(4) > 0 {
				o = set[rng.IntN(len(set))] // mostly one that was set
			}
			_, err = w.ClearOverride(ctx, "t", o.Dimension, o.Identifier, o.RuleID)
		case 10:
			rs := make([]Rule, 1+rng.IntN(3))
			for i := range rs {
				rs[i] = randRule()
				rs[i].ID = ids[(i+rng.IntN(len(ids)))%len(ids)]
			}
			_, err = w.Import(ctx, "t", rs)
		}
		if err == nil {
			written++
		}
		clock.add(time.Duration(rng.IntN(90)) * time.Second) // overrides lapse as the sequence goes
		if rng.IntN(3) == 0 {
			continue // several writes between loads
		}
		loads++
		msg := fmt.Sprintf("step %d (op %d, seed %d)", step, op, seed)
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
	counts := src.loads
	src.mu.Unlock()
	t.Logf("%d writes of %d, %d loads: %d full, %d incremental", written, steps, loads, counts.full, counts.incremental)
	require.Greater(t, written, steps/4, "the sequence must write, not only be refused")
	require.Equal(t, 1, counts.full, "every load after the first is incremental: the audit accounts for every revision")
	require.Equal(t, loads, counts.incremental)
}

// A revision without its audit row (a write this build does not know of)
// and a revision going backwards (a restored backup) make the next load
// full; so do the safety nets: every fullEvery-th load and fullAfter.
func TestIncrementalLoadFallsBack(t *testing.T) { each(t, testIncrementalLoadFallsBack) }

func testIncrementalLoadFallsBack(t *testing.T, dsn string) {
	ctx := tctx(t)
	clock := &fakeClock{t: time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)}
	w := open(t, dsn)
	w.now = clock.now
	src := open(t, dsn).Source(0)
	src.now = clock.now
	src.o.fullEvery, src.o.fullAfter = 4, time.Hour
	counts := func() loadCounts {
		src.mu.Lock()
		defer src.mu.Unlock()
		return src.loads
	}
	load := func(wantRules int) {
		t.Helper()
		snap, err := src.Load(ctx)
		require.NoError(t, err)
		require.Len(t, snap.Rules(), wantRules)
	}
	load(0)
	_, err := w.Create(ctx, "t", sample("a"))
	require.NoError(t, err)
	load(1)
	require.Equal(t, loadCounts{full: 1, incremental: 1}, counts())

	// A rule written behind the store's back, with a revision and no
	// audit row: the gap is seen, the load is full and finds it.
	tx, err := w.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	rev, err := w.bump(ctx, tx)
	require.NoError(t, err)
	b := sample("b")
	b.EndpointPattern = "/api/b"
	_, err = tx.ExecContext(ctx, w.q(`INSERT INTO rules (`+ruleCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		b.ID, b.Name, b.Dimension, b.EndpointPattern, b.Limit, b.WindowSeconds, b.Algorithm, b.Tier, b.Burst, b.Shadow, b.Enabled, rev, 0, 0)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	load(2)
	require.Equal(t, loadCounts{full: 2, incremental: 1}, counts())

	// The revision going backwards: full.
	_, err = w.db.ExecContext(ctx, `UPDATE revision SET value = value - 1 WHERE id = 1`)
	require.NoError(t, err)
	load(2)
	require.Equal(t, loadCounts{full: 3, incremental: 1}, counts())
	_, err = w.db.ExecContext(ctx, `UPDATE revision SET value = value + 1 WHERE id = 1`)
	require.NoError(t, err)

	// The safety nets: the 4th load in a row is full, and so is a load
	// an hour after the last full one.
	for i, id := range []string{"c", "d", "e"} {
		r := sample(id)
		r.EndpointPattern = "/api/" + id
		_, err = w.Create(ctx, "t", r)
		require.NoError(t, err)
		load(3 + i)
	}
	require.Equal(t, loadCounts{full: 4, incremental: 3}, counts())
	clock.add(time.Hour)
	load(5)
	require.Equal(t, loadCounts{full: 5, incremental: 3}, counts())
	for range 3 {
		load(5)
	}
	require.Equal(t, loadCounts{full: 5, incremental: 6}, counts())
	load(5)
	require.Equal(t, loadCounts{full: 6, incremental: 6}, counts())
}

// An override set again with an earlier expiry that has passed by the next
// load is gone from an incremental load as from a full one: the row read
// since is expired, and it must still replace the earlier row of its key,
// whose own expiry is later.
func TestIncrementalLoadOverrideShortenedAndLapsed(t *testing.T) {
	each(t, testIncrementalLoadOverrideShortenedAndLapsed)
}

func testIncrementalLoadOverrideShortenedAndLapsed(t *testing.T, dsn string) {
	ctx := tctx(t)
	clock := &fakeClock{t: time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)}
	w := open(t, dsn)
	w.now = clock.now
	r := open(t, dsn)
	src := r.Source(0)
	src.now = clock.now
	src.o.fullEvery, src.o.fullAfter = 1<<30, 1<<62

	_, err := w.Create(ctx, "t", sample("a"))
	require.NoError(t, err)
	o := Override{Dimension: "user", Identifier: "alice", RuleID: "a", Block: true, ExpiresAt: clock.now().Add(time.Hour)}
	_, err = w.SetOverride(ctx, "t", o)
	require.NoError(t, err)
	snap, err := src.Load(ctx)
	require.NoError(t, err)
	require.Len(t, snap.Overrides(), 1)

	o.ExpiresAt = clock.now().Add(time.Second)
	_, err = w.SetOverride(ctx, "t", o)
	require.NoError(t, err)
	clock.add(2 * time.Second)
	got, err := src.Load(ctx)
	require.NoError(t, err)
	want, wantSt := fullLoad(t, ctx, r, clock.now)
	require.Empty(t, want.Overrides())
	requireSameSnapshot(t, want, got, "override shortened, lapsed before the load")
	src.mu.Lock()
	gotSt, counts := src.base, src.loads
	src.mu.Unlock()
	require.Equal(t, wantSt, gotSt)
	require.Equal(t, loadCounts{full: 1, incremental: 1}, counts)
}
