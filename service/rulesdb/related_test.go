package rulesdb

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fillUnrelated stores n enabled rules without a tier in one statement and
// one revision (no audit row, as a bulk load): "x0"... of dimension user
// or ip, each with an endpoint pattern of its own ("/s/0"...).
func fillUnrelated(t *testing.T, ctx context.Context, d *DB, n int) {
	t.Helper()
	tx, err := d.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	rev, err := d.bump(ctx, tx)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, d.q(`WITH RECURSIVE seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i < ?)
		INSERT INTO rules (`+ruleCols+`)
		SELECT 'x' || i, 'unrelated', CASE WHEN i % 2 = 0 THEN 'user' ELSE 'ip' END, '/s/' || i, 100, 60, 'gcra', '', 0, FALSE, TRUE, ?, 0, 0 FROM seq`),
		n-1, rev)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
}

// wholeSetRefusal is what the check of the whole resulting rule set (every
// write's check before migration 4) says of change: it applies change in
// a transaction, checks every stored rule and tier as the engine would,
// and rolls back.
func wholeSetRefusal(t *testing.T, ctx context.Context, d *DB, change func(tx *sql.Tx) error) error {
	t.Helper()
	tx, err := d.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	require.NoError(t, change(tx))
	all, err := loadRules(ctx, tx)
	require.NoError(t, err)
	tiers, err := loadTiers(ctx, tx)
	require.NoError(t, err)
	_, err = snapshot(0, all, tiers)
	return err
}

// Each class of refusal of the rule set (a second base row for a dimension
// and endpoint pattern, a tier row without its base, a tier given twice, a
// base removed, moved or disabled under its tier rows, an import
// conflicting with the stored rules) is still refused with 10 000
// unrelated rules stored, and nothing is written; with 2 000 the error is
// also compared with the whole-set check's (which reads every rule: too
// slow under the race detector at scale for 8 cases). Writes beside them
// are accepted. The related check has no bound of its own that a larger
// set could pass (one query by the index of migration 4, no LIMIT, no
// pages): 10 000 rows spread the table and its index over many pages in
// both databases, as 100 000 do, at a tenth of the time (storing them is
// most of this test's).
func TestRelatedCheckRefusesAtScale(t *testing.T) {
	each(t, func(t *testing.T, dsn string) { testRelatedCheckRefuses(t, dsn, 10_000, false) })
}

func TestRelatedCheckRefusesAsWholeSet(t *testing.T) {
	each(t, func(t *testing.T, dsn string) { testRelatedCheckRefuses(t, dsn, 2000, true) })
}

func testRelatedCheckRefuses(t *testing.T, dsn string, unrelated int, compare bool) {
	// Storing the unrelated rules takes most of it (100 000 in SQLite
	// under the race detector: about 15 s on 2 busy cores); the writes
	// are fast.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := open(t, dsn)
	fillUnrelated(t, ctx, d, unrelated)
	base := sample("orders")
	_, err := d.Create(ctx, "t", base)
	require.NoError(t, err)
	gold := base
	gold.ID, gold.Tier, gold.Limit = "orders-gold", "gold", 1000
	_, err = d.Create(ctx, "t", gold)
	require.NoError(t, err)
	rev0, err := d.Revision(ctx)
	require.NoError(t, err)

	insert := func(r Rule) func(tx *sql.Tx) error {
		return func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, d.q(`INSERT INTO rules (`+ruleCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
				r.ID, r.Name, r.Dimension, r.EndpointPattern, r.Limit, r.WindowSeconds, r.Algorithm, r.Tier, r.Burst, r.Shadow, r.Enabled, 0, 0, 0)
			return err
		}
	}
	replace := func(r Rule) func(tx *sql.Tx) error {
		return func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, d.q(`DELETE FROM rules WHERE id = ?`), r.ID); err != nil {
				return err
			}
			return insert(r)(tx)
		}
	}
	remove := func(id string) func(tx *sql.Tx) error {
		return func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, d.q(`DELETE FROM rules WHERE id = ?`), id)
			return err
		}
	}
	second := base
	second.ID = "orders2"
	orphan := gold
	orphan.ID, orphan.EndpointPattern = "none-gold", "/api/none"
	twice := gold
	twice.ID = "orders-gold2"
	moved := base
	moved.EndpointPattern = "/api/other/**"
	disabled := base
	disabled.Enabled = false
	into := sample("x4") // an unrelated rule (user, /s/4) moved onto the base's key
	imported := []Rule{sample("new1"), second}
	imported[0].EndpointPattern = "/api/new1"

	cases := []struct {
		name   string
		write  func() error
		change func(tx *sql.Tx) error
		want   string
	}{
		{"second base", func() error { _, err := d.Create(ctx, "t", second); return err }, insert(second), "endpoint_pattern"},
		{"tier without base", func() error { _, err := d.Create(ctx, "t", orphan); return err }, insert(orphan), "tier"},
		{"tier twice", func() error { _, err := d.Create(ctx, "t", twice); return err }, insert(twice), "given twice"},
		{"base deleted", func() error { _, err := d.Delete(ctx, "t", "orders", "*"); return err }, remove("orders"), "tier"},
		{"base moved", func() error { _, err := d.Update(ctx, "t", moved, "*"); return err }, replace(moved), "tier"},
		{"base disabled", func() error { _, err := d.Update(ctx, "t", disabled, "*"); return err }, replace(disabled), "tier"},
		{"unrelated moved onto a base", func() error { _, err := d.Update(ctx, "t", into, "*"); return err }, replace(into), "endpoint_pattern"},
		{"import", func() error { _, err := d.Import(ctx, "t", imported); return err }, func(tx *sql.Tx) error {
			if err := insert(imported[0])(tx); err != nil {
				return err
			}
			return insert(imported[1])(tx)
		}, "endpoint_pattern"},
	}
	for _, c := range cases {
		err := c.write()
		require.ErrorIs(t, err, ErrInvalid, c.name)
		require.ErrorContains(t, err, c.want, c.name)
		if compare {
			whole := wholeSetRefusal(t, ctx, d, c.change)
			require.Error(t, whole, c.name)
			require.Contains(t, err.Error(), whole.Error(), c.name+": the whole-set check's refusal")
		}
		rev, err := d.Revision(ctx)
		require.NoError(t, err)
		require.Equal(t, rev0, rev, c.name+": nothing written")
	}
	_, err = d.Get(ctx, "new1")
	require.ErrorIs(t, err, ErrNotFound)

	// Beside them: a rule of its own key, a tier of the base, the base
	// changed in place, the unrelated rule moved to a free key.
	ok := sample("fresh")
	ok.EndpointPattern = "/api/fresh"
	_, err = d.Create(ctx, "t", ok)
	require.NoError(t, err)
	silver := gold
	silver.ID, silver.Tier = "orders-silver", "silver"
	_, err = d.Create(ctx, "t", silver)
	require.NoError(t, err)
	base.Limit = 7
	_, err = d.Update(ctx, "t", base, "*")
	require.NoError(t, err)
	into.EndpointPattern = "/api/free"
	_, err = d.Update(ctx, "t", into, "*")
	require.NoError(t, err)
	var n int
	require.NoError(t, d.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM rules`).Scan(&n))
	require.Equal(t, unrelated+4, n) // the unrelated, orders, its gold and silver, fresh
	if compare {
		snap, err := d.Source(0).Load(ctx)
		require.NoError(t, err)
		require.Len(t, snap.Rules(), unrelated+2) // tier rows fold into orders
	}
}
