package rulesdb

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func ruleIDs(rs []*Rule) []string {
	var ids []string
	for _, r := range rs {
		ids = append(ids, r.ID)
	}
	return ids
}

// The rules' search: an ID or endpoint pattern holding the text (case
// counts), a name holding it in any case, each with the exact filters,
// and paged by key within the selection.
func TestListRulesSearch(t *testing.T) { each(t, testListRulesSearch) }

func testListRulesSearch(t *testing.T, dsn string) {
	ctx := tctx(t)
	d := open(t, dsn)
	for i, name := range []string{"Orders EU", "orders us", "Payments", "Search %_ literal", "ORDERS archive", "Zürich Orders"} {
		r := sample(fmt.Sprintf("rule-%d", i))
		r.Name, r.EndpointPattern = name, fmt.Sprintf("/api/v%d/%d/**", i%2, i)
		if i >= 3 {
			r.Algorithm = "gcra"
		}
		_, err := d.Create(ctx, "alice", r)
		require.NoError(t, err)
	}
	for _, c := range []struct {
		f    RuleFilter
		want []string
	}{
		{RuleFilter{Name: "orders"}, []string{"rule-0", "rule-1", "rule-4", "rule-5"}},
		{RuleFilter{Name: "ORDERS"}, []string{"rule-0", "rule-1", "rule-4", "rule-5"}},
		{RuleFilter{Name: "%_"}, []string{"rule-3"}}, // no pattern characters
		{RuleFilter{Name: "d_r"}, nil},               // as a LIKE pattern it would match "ders"
		{RuleFilter{Name: "zür"}, []string{"rule-5"}},
		{RuleFilter{Name: "orders", Algorithm: "gcra"}, []string{"rule-4", "rule-5"}},
		{RuleFilter{ID: "e-1"}, []string{"rule-1"}},
		{RuleFilter{ID: "RULE"}, nil},
		{RuleFilter{Endpoint: "/v1/"}, []string{"rule-1", "rule-3", "rule-5"}},
		{RuleFilter{Endpoint: "/v1/", Name: "orders"}, []string{"rule-1", "rule-5"}},
		{RuleFilter{Endpoint: "/API/"}, nil},
	} {
		rs, next, err := d.ListRules(ctx, c.f, "", 100)
		require.NoError(t, err, "%+v", c.f)
		require.Empty(t, next)
		require.Equal(t, c.want, ruleIDs(rs), "%+v", c.f)
	}
	// Two at a time: every match once, in ID order.
	var got []string
	cursor := ""
	for range 5 {
		rs, next, err := d.ListRules(ctx, RuleFilter{Name: "orders"}, cursor, 2)
		require.NoError(t, err)
		got = append(got, ruleIDs(rs)...)
		if cursor = next; cursor == "" {
			break
		}
	}
	require.Equal(t, []string{"rule-0", "rule-1", "rule-4", "rule-5"}, got)
}

// The audit's filters: an action exactly or by a prefix ending in ".",
// with the actor, a time window and a target prefix holding non-ASCII
// text (compared in characters, as substr counts them).
func TestAuditQueryActionAndPrefixes(t *testing.T) { each(t, testAuditQueryActionAndPrefixes) }

func testAuditQueryActionAndPrefixes(t *testing.T, dsn string) {
	ctx := tctx(t)
	clock := &fakeClock{t: time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)}
	d := open(t, dsn)
	d.now = clock.now
	_, err := d.Create(ctx, "alice", sample("a")) // 1
	require.NoError(t, err)
	clock.add(time.Minute)
	_, err = d.SetTier(ctx, "bob", "user", "zoë", "gold") // 2
	require.NoError(t, err)
	clock.add(time.Minute)
	_, err = d.SetOverride(ctx, "bob", Override{Dimension: "user", Identifier: "zoë", RuleID: "a", Block: true, ExpiresAt: clock.now().Add(time.Hour)}) // 3
	require.NoError(t, err)
	clock.add(time.Minute)
	_, err = d.Update(ctx, "alice", func() Rule { r := sample("a"); r.Limit = 5; return r }(), "*") // 4
	require.NoError(t, err)
	_, err = d.SetTier(ctx, "alice", "user", "zoë", "") // 5
	require.NoError(t, err)
	revs := func(f AuditFilter) []int64 {
		t.Helper()
		es, _, err := d.AuditQuery(ctx, f)
		require.NoError(t, err, "%+v", f)
		var out []int64
		for _, e := range es {
			out = append(out, e.Revision)
		}
		return out
	}
	t0 := time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)
	require.Equal(t, []int64{1, 4}, revs(AuditFilter{Action: "rule."}))
	require.Equal(t, []int64{4}, revs(AuditFilter{Action: "rule.update"}))
	require.Equal(t, []int64{2, 5}, revs(AuditFilter{Action: "tier."}))
	require.Equal(t, []int64{5}, revs(AuditFilter{Action: "tier.", Actor: "alice"}))
	require.Nil(t, revs(AuditFilter{Action: "rule"}), "an exact action, not a prefix")
	require.Nil(t, revs(AuditFilter{Target: "x/"}))
	require.Equal(t, []int64{3}, revs(AuditFilter{Target: "override/user/zoë/"}))
	require.Equal(t, []int64{2, 5}, revs(AuditFilter{Target: "tier/user/zoë"}))
	require.Equal(t, []int64{2, 3}, revs(AuditFilter{Since: t0.Add(time.Minute), Until: t0.Add(3 * time.Minute)}))
	require.Equal(t, []int64{3, 2}, revs(AuditFilter{Actor: "bob", Newest: true}))
}

// On SQLite the audit's filters by actor, action and target, newest first,
// read their index, not the whole table.
func TestAuditFiltersUseIndexes(t *testing.T) {
	ctx := tctx(t)
	d := open(t, sqliteOnly(t))
	for _, c := range []struct {
		f     AuditFilter
		index string
	}{
		{AuditFilter{Actor: "alice", Newest: true}, "audit_actor"},
		{AuditFilter{Action: "rule.update", Newest: true}, "audit_action"},
		{AuditFilter{Target: "rule/orders", Newest: true}, "audit_target"},
	} {
		where, args, err := c.f.where("d", "<")
		require.NoError(t, err)
		rows, err := d.db.QueryContext(ctx, `EXPLAIN QUERY PLAN SELECT `+auditColumns+` FROM audit WHERE `+strings.Join(where, " AND ")+` ORDER BY revision DESC LIMIT 101`, args...)
		require.NoError(t, err)
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			require.NoError(t, rows.Scan(&id, &parent, &unused, &detail))
			plan = append(plan, detail)
		}
		require.NoError(t, rows.Err())
		require.Contains(t, strings.Join(plan, "; "), c.index, "%+v", c.f)
	}
}
