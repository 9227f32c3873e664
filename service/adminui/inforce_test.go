package adminui

import (
	"context"
	"database/sql"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// A saved rule is in force on the instance when the page answers: the
// checks made right after the redirect are decided under it.
func TestSavedRuleInForceWhenAnswered(t *testing.T) {
	onEachDB(t, func(t *testing.T, s *stack) {
		c := s.client()
		c.login(s.write)
		form := ruleForm(t, c.get("/admin/rules/orders").body)
		form.Set("limit", "2")
		r := c.post("/admin/rules/orders", form)
		require.Equal(t, http.StatusSeeOther, r.status, r.body)
		for i, want := range []bool{true, true, false} {
			res, err := s.eng.Check(context.Background(), engine.Check{Dimension: "user", Identifier: "ann", Endpoint: "/api/orders/1", Cost: 1})
			require.NoError(t, err)
			require.Equal(t, want, res.Allowed, "check %d right after the save of 2/min", i+1)
		}
		require.Contains(t, c.get(r.header.Get("Location")).body, "is in force on this instance")
	})
}

// A save committed while the stored rule set cannot be put in force (an
// operator's hand edit made it invalid) answers 503: the page says the
// rule is saved, at which version, and which version stays in force.
func TestSaveCommittedButRefused(t *testing.T) {
	onEachDB(t, func(t *testing.T, s *stack) {
		c := s.client()
		c.login(s.write)
		form := ruleForm(t, c.get("/admin/rules/orders").body)
		inForce := s.eng.Snapshot().Revision()

		driver, dsn, ph := "sqlite", strings.TrimPrefix(s.dsn, "file:"), []string{"?", "?"}
		if rulesdb.IsPostgres(s.dsn) {
			driver, dsn, ph = "pgx", s.dsn, []string{"$1", "$2"}
		}
		db, err := sql.Open(driver, dsn)
		require.NoError(t, err)
		defer db.Close()
		ctx := context.Background()
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		var rev int64
		require.NoError(t, tx.QueryRowContext(ctx, `UPDATE revision SET value = value + 1 WHERE id = 1 RETURNING value`).Scan(&rev))
		// Two base rules of one dimension and pattern, unrelated to the
		// rule saved (whose own checks cannot see them).
		for _, id := range []string{"twin-a", "twin-b"} {
			_, err = tx.ExecContext(ctx, `INSERT INTO rules (id, name, dimension, endpoint_pattern, "limit", window_seconds, algorithm, tier, burst, shadow, enabled, revision, created_at, updated_at)
				VALUES ('`+id+`', 'twin', 'user', '/twins/**', 5, 60, 'fixed_window', '', 0, `+ph[0]+`, `+ph[1]+`, `+strconv.FormatInt(rev, 10)+`, 0, 0)`, false, true)
			require.NoError(t, err)
		}
		require.NoError(t, tx.Commit())

		form.Set("limit", "3")
		r := c.post("/admin/rules/orders", form)
		require.Equal(t, http.StatusServiceUnavailable, r.status, r.body)
		saved, err := s.db.Get(ctx, "orders")
		require.NoError(t, err)
		require.EqualValues(t, 3, saved.Limit, "saved")
		require.Contains(t, r.body, "Saved as version &#34;"+strconv.FormatInt(saved.Revision, 10)+"&#34;")
		require.Contains(t, r.body, "refused to put the rules in force (version &#34;"+inForce+"&#34; stays")
		require.NotContains(t, r.body, "twin", "the cause is logged, not shown")
		require.Equal(t, inForce, s.eng.Snapshot().Revision())
	})
}
