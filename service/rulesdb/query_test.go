package rulesdb

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestListRulesFiltersAndPages(t *testing.T) { each(t, testListRulesFiltersAndPages) }

func testListRulesFiltersAndPages(t *testing.T, dsn string) {
	ctx := tctx(t)
	d := open(t, dsn)
	for i := range 25 {
		r := sample(fmt.Sprintf("r%02d", i))
		r.EndpointPattern = fmt.Sprintf("/api/%d/**", i)
		if i%2 == 1 {
			r.Dimension = "ip"
		}
		if i%5 == 0 {
			r.Enabled = false
		}
		if i%3 == 0 {
			r.Algorithm = "gcra"
		}
		_, err := d.Create(ctx, "alice", r)
		require.NoError(t, err)
	}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10)
		rs, next, err := d.ListRules(ctx, RuleFilter{}, cursor, 7)
		require.NoError(t, err)
		for _, r := range rs {
			got = append(got, r.ID)
		}
		if next == "" {
			break
		}
		require.Len(t, rs, 7)
		cursor = next
	}
	require.Len(t, got, 25)
	require.Equal(t, "r00", got[0])
	require.Equal(t, "r24", got[24])

	off := false
	rs, next, err := d.ListRules(ctx, RuleFilter{Dimension: "user", Enabled: &off}, "", 100)
	require.NoError(t, err)
	require.Empty(t, next)
	var ids []string
	for _, r := range rs {
		ids = append(ids, r.ID)
	}
	require.Equal(t, []string{"r00", "r10", "r20"}, ids)

	rs, _, err = d.ListRules(ctx, RuleFilter{Algorithm: "gcra", Dimension: "ip"}, "", 100)
	require.NoError(t, err)
	ids = nil
	for _, r := range rs {
		ids = append(ids, r.ID)
	}
	require.Equal(t, []string{"r03", "r09", "r15", "r21"}, ids)

	_, _, err = d.ListRules(ctx, RuleFilter{}, "r05", 10)
	require.ErrorIs(t, err, ErrCursor)
	_, _, err = d.ListRules(ctx, RuleFilter{}, encodeCursor("a", "5"), 10)
	require.ErrorIs(t, err, ErrCursor)
	_, _, err = d.ListRules(ctx, RuleFilter{}, "", 1001)
	require.ErrorContains(t, err, "limit")
}

func TestAuditQuery(t *testing.T) { each(t, testAuditQuery) }

func testAuditQuery(t *testing.T, dsn string) {
	ctx := tctx(t)
	d := open(t, dsn)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tick := 0
	d.now = func() time.Time { tick++; return base.Add(time.Duration(tick) * time.Minute) }
	for i := range 10 {
		actor := "alice"
		if i%2 == 1 {
			actor = "bob"
		}
		r := sample(fmt.Sprintf("r%d", i))
		r.EndpointPattern = fmt.Sprintf("/x/%d", i)
		_, err := d.Create(ctx, actor, r)
		require.NoError(t, err)
	}
	_, err := d.SetTier(ctx, "carol", "user", "alice", "gold")
	require.NoError(t, err)
	_, err = d.SetOverride(ctx, "carol", Override{Dimension: "user", Identifier: "alice", RuleID: "r1", Block: true, ExpiresAt: base.Add(time.Hour)})
	require.NoError(t, err)

	all, next, err := d.AuditQuery(ctx, AuditFilter{})
	require.NoError(t, err)
	require.Empty(t, next)
	require.Len(t, all, 12)

	es, _, err := d.AuditQuery(ctx, AuditFilter{Actor: "bob"})
	require.NoError(t, err)
	require.Len(t, es, 5)
	for _, e := range es {
		require.Equal(t, "bob", e.Actor)
	}
	es, _, err = d.AuditQuery(ctx, AuditFilter{Target: "rule/r3"})
	require.NoError(t, err)
	require.Len(t, es, 1)
	require.Equal(t, "rule.create", es[0].Action)
	es, _, err = d.AuditQuery(ctx, AuditFilter{Target: "override/user/alice/"})
	require.NoError(t, err)
	require.Len(t, es, 1)
	require.Equal(t, "override.set", es[0].Action)
	es, _, err = d.AuditQuery(ctx, AuditFilter{Target: "rule/"})
	require.NoError(t, err)
	require.Len(t, es, 10)

	es, _, err = d.AuditQuery(ctx, AuditFilter{Since: all[2].At, Until: all[5].At})
	require.NoError(t, err)
	require.Len(t, es, 3)
	require.Equal(t, all[2].Revision, es[0].Revision)

	// Pages, newest first, with writes between pages.
	var revs []int64
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10)
		es, next, err := d.AuditQuery(ctx, AuditFilter{Newest: true, Cursor: cursor, Limit: 5})
		require.NoError(t, err)
		for _, e := range es {
			revs = append(revs, e.Revision)
		}
		r := sample(fmt.Sprintf("late%d", pages))
		r.EndpointPattern = fmt.Sprintf("/late/%d", pages)
		_, err = d.Create(ctx, "alice", r)
		require.NoError(t, err)
		if next == "" {
			break
		}
		cursor = next
	}
	require.Equal(t, []int64{12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1}, revs)

	_, _, err = d.AuditQuery(ctx, AuditFilter{Cursor: cursor})
	require.ErrorIs(t, err, ErrCursor, "a newest-first cursor is not an oldest-first one")
	_, _, err = d.AuditQuery(ctx, AuditFilter{Since: base, Until: base})
	require.ErrorContains(t, err, "until")
}
