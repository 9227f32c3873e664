package attack

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/internal/ratelimitdtest"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// TestAttackKilledMidWrites: `ratelimitd serve --db` SIGKILLed in the
// middle of many concurrent admin writes (rules created, replaced and
// deleted, tiers, overrides set and cleared; idempotent POSTs) leaves a
// database where every change is whole or absent: the audit's revisions
// are exactly 1..revision (one row each, none missing), every stored rule,
// tier and override is the "after" of the audit row of its revision, and
// the rule set loads. On SQLite and PostgreSQL, real processes.
func TestAttackKilledMidWrites(t *testing.T) {
	bin := ratelimitd(t)
	onDBs(t, func(t *testing.T, dsn string) {
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		db, err := rulesdb.Open(ctx, dsn)
		require.NoError(t, err)
		const workers = 8
		var secrets []string
		for i := range workers {
			s, _, err := db.CreateToken(ctx, "cli", fmt.Sprintf("w%d", i), rulesdb.ScopeWrite)
			require.NoError(t, err)
			secrets = append(secrets, s)
		}
		_, err = db.Create(ctx, "cli", rulesdb.Rule{ID: "base", Name: "base", Dimension: "user", Limit: 100, WindowSeconds: 60, Algorithm: "gcra", Enabled: true})
		require.NoError(t, err)
		require.NoError(t, db.Close())

		p := ratelimitdtest.Start(t, bin, nil, "--db", dsn)
		var writes atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		client := &http.Client{Timeout: 5 * time.Second}
		for w := range workers {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(w), 15))
				send := func(method, path string, body any, hdr ...string) int {
					b, _ := json.Marshal(body)
					req, _ := http.NewRequest(method, p.URL(path), bytes.NewReader(b))
					req.Header.Set("Authorization", "Bearer "+secrets[w])
					req.Header.Set("Content-Type", "application/json")
					for i := 0; i+1 < len(hdr); i += 2 {
						req.Header.Set(hdr[i], hdr[i+1])
					}
					resp, err := client.Do(req)
					if err != nil {
						return 0
					}
					_ = resp.Body.Close()
					if resp.StatusCode < 300 {
						writes.Add(1)
					}
					return resp.StatusCode
				}
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					id := fmt.Sprintf("r%d-%d", w, rng.IntN(6))
					user := fmt.Sprintf("u%d", rng.IntN(20))
					rule := map[string]any{"id": id, "name": id, "dimension": "user", "endpoint_pattern": "/" + id + "/**",
						"limit": 1 + rng.IntN(1000), "window_seconds": 60, "algorithm": "fixed_window", "enabled": true}
					switch rng.IntN(6) {
					case 0:
						send(http.MethodPost, "/api/v1/rules", rule, "Idempotency-Key", fmt.Sprintf("k%d-%d", w, i))
					case 1:
						send(http.MethodPut, "/api/v1/rules/"+id, rule, "If-Match", "*")
					case 2:
						send(http.MethodDelete, "/api/v1/rules/"+id, nil, "If-Match", "*")
					case 3:
						send(http.MethodPut, "/api/v1/users/"+user+"/tier", map[string]any{"tier": fmt.Sprintf("t%d", rng.IntN(3))})
					case 4:
						send(http.MethodPost, "/api/v1/users/"+user+"/override", map[string]any{"rule_id": "base", "limit": 1 + rng.IntN(50), "window_seconds": 60, "ttl_seconds": 600})
					case 5:
						send(http.MethodDelete, "/api/v1/users/"+user+"/override/base", nil)
					}
				}
			})
		}
		require.Eventually(t, func() bool { return writes.Load() >= 60 }, 20*time.Second, time.Millisecond)
		require.NoError(t, p.Signal(syscall.SIGKILL))
		close(stop)
		wg.Wait()
		_, _ = p.Wait(10 * time.Second)

		verifyWhole(t, ctx, dsn)
	})
}

// verifyWhole checks the database at dsn: audit revisions dense and one
// per write, every row the after of its revision's audit row, the rule set
// loading.
func verifyWhole(t *testing.T, ctx context.Context, dsn string) {
	t.Helper()
	db, err := rulesdb.Open(ctx, dsn)
	require.NoError(t, err)
	defer func() { _ = db.Close() }()
	_, err = db.Source(0).Load(ctx)
	require.NoError(t, err, "the rule set loads")
	rev, err := db.Revision(ctx)
	require.NoError(t, err)

	driver, name := "sqlite", strings.TrimPrefix(dsn, "file:")
	q := func(s string) string { return s }
	if rulesdb.IsPostgres(dsn) {
		driver, name = "pgx", dsn
		q = func(s string) string { return strings.ReplaceAll(s, "?", "$1") }
	}
	raw, err := sql.Open(driver, name)
	require.NoError(t, err)
	defer func() { _ = raw.Close() }()
	var n, lo, hi int64
	require.NoError(t, raw.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(MIN(revision), 0), COALESCE(MAX(revision), 0) FROM audit`).Scan(&n, &lo, &hi))
	require.Equal(t, rev, n, "one audit row per revision")
	require.Equal(t, int64(1), lo)
	require.Equal(t, rev, hi, "no revision without its audit row, none after")

	after := func(revision int64) (action, target string, body json.RawMessage) {
		var a sql.NullString
		require.NoError(t, raw.QueryRowContext(ctx, q(`SELECT action, target, after_json FROM audit WHERE revision = ?`), revision).Scan(&action, &target, &a))
		return action, target, json.RawMessage(a.String)
	}
	rows, err := raw.QueryContext(ctx, `SELECT id, "limit", revision FROM rules`)
	require.NoError(t, err)
	type rr struct {
		id       string
		limit    int64
		revision int64
	}
	var rs []rr
	for rows.Next() {
		var r rr
		require.NoError(t, rows.Scan(&r.id, &r.limit, &r.revision))
		rs = append(rs, r)
	}
	require.NoError(t, rows.Close())
	for _, r := range rs {
		action, target, body := after(r.revision)
		require.Equal(t, "rule/"+r.id, target, "rule %s at revision %d (%s)", r.id, r.revision, action)
		var a rulesdb.Rule
		require.NoError(t, json.Unmarshal(body, &a))
		require.Equal(t, r.limit, a.Limit, "rule %s: the row is its audit row's after", r.id)
	}
	rows, err = raw.QueryContext(ctx, `SELECT dimension, identifier, tier, revision FROM user_tiers`)
	require.NoError(t, err)
	var tiers [][4]any
	for rows.Next() {
		var d, id, tier string
		var revision int64
		require.NoError(t, rows.Scan(&d, &id, &tier, &revision))
		tiers = append(tiers, [4]any{d, id, tier, revision})
	}
	require.NoError(t, rows.Close())
	for _, tr := range tiers {
		_, target, body := after(tr[3].(int64))
		require.Equal(t, "tier/"+tr[0].(string)+"/"+tr[1].(string), target)
		var a rulesdb.TierAssignment
		require.NoError(t, json.Unmarshal(body, &a))
		require.Equal(t, tr[2], a.Tier)
	}
	rows, err = raw.QueryContext(ctx, `SELECT dimension, identifier, rule_id, "limit", revision, cleared_at FROM overrides`)
	require.NoError(t, err)
	type or struct {
		d, id, rule    string
		limit, revison int64
		cleared        sql.NullInt64
	}
	var ors []or
	for rows.Next() {
		var o or
		require.NoError(t, rows.Scan(&o.d, &o.id, &o.rule, &o.limit, &o.revison, &o.cleared))
		ors = append(ors, o)
	}
	require.NoError(t, rows.Close())
	for _, o := range ors {
		action, target, body := after(o.revison)
		if o.cleared.Valid {
			require.Contains(t, []string{"override.clear", "rule.delete"}, action)
			continue
		}
		require.Equal(t, "override/"+o.d+"/"+o.id+"/"+o.rule, target)
		var a rulesdb.Override
		require.NoError(t, json.Unmarshal(body, &a))
		require.Equal(t, o.limit, a.Limit)
	}
	t.Logf("revision %d: %d rules, %d tiers, %d overrides, all whole", rev, len(rs), len(tiers), len(ors))
}
