package rulesdb

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// ListCallers lists the callers with a tier or an override in force (not
// a cleared or lapsed one), with their tier and overrides counted, by
// dimension and identifier prefix (non-ASCII included), paged by key:
// every caller there throughout a listing is listed once, whatever is
// written between its pages.
func TestListCallers(t *testing.T) { each(t, testListCallers) }

func testListCallers(t *testing.T, dsn string) {
	ctx := tctx(t)
	clock := &fakeClock{t: time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)}
	d := open(t, dsn)
	d.now = clock.now
	for _, id := range []string{"a", "b"} {
		r := sample(id)
		r.EndpointPattern = "/api/" + id
		_, err := d.Create(ctx, "t", r)
		require.NoError(t, err)
		ip := r
		ip.ID, ip.Dimension = id+"-ip", "ip"
		_, err = d.Create(ctx, "t", ip)
		require.NoError(t, err)
	}
	block := func(dim, id, rule string, for_ time.Duration) {
		t.Helper()
		_, err := d.SetOverride(ctx, "t", Override{Dimension: dim, Identifier: id, RuleID: rule, Block: true, ExpiresAt: clock.now().Add(for_)})
		require.NoError(t, err)
	}
	for _, id := range []string{"alice", "amélie", "bob"} {
		_, err := d.SetTier(ctx, "t", "user", id, "gold")
		require.NoError(t, err)
	}
	block("user", "amélie", "a", time.Hour)
	block("user", "amélie", "b", time.Hour)
	block("user", "carol", "a", time.Hour)
	block("user", "dave", "a", time.Hour) // cleared below
	block("user", "erin", "a", time.Minute)
	block("ip", "10.0.0.1", "a-ip", time.Hour)
	_, err := d.ClearOverride(ctx, "t", "user", "dave", "a")
	require.NoError(t, err)
	clock.add(2 * time.Minute) // erin's lapses

	list := func(f CallerFilter) []Caller {
		t.Helper()
		cs, next, err := d.ListCallers(ctx, f, "", 100)
		require.NoError(t, err)
		require.Empty(t, next)
		return cs
	}
	require.Equal(t, []Caller{
		{Dimension: "ip", Identifier: "10.0.0.1", Overrides: 1},
		{Dimension: "user", Identifier: "alice", Tier: "gold"},
		{Dimension: "user", Identifier: "amélie", Tier: "gold", Overrides: 2},
		{Dimension: "user", Identifier: "bob", Tier: "gold"},
		{Dimension: "user", Identifier: "carol", Overrides: 1},
	}, list(CallerFilter{}))
	require.Equal(t, []Caller{{Dimension: "user", Identifier: "amélie", Tier: "gold", Overrides: 2}}, list(CallerFilter{Identifier: "amé"}))
	require.Len(t, list(CallerFilter{Dimension: "user", Identifier: "a"}), 2)
	require.Empty(t, list(CallerFilter{Dimension: "ip", Identifier: "a"}))
	require.Empty(t, list(CallerFilter{Identifier: "dave"}), "a cleared override is no caller's")
	require.Empty(t, list(CallerFilter{Identifier: "erin"}), "nor a lapsed one")

	// Pages of two, with a caller added and one removed between pages:
	// those there throughout are listed once each.
	var got []string
	cursor := ""
	for page := 0; ; page++ {
		require.Less(t, page, 10)
		cs, next, err := d.ListCallers(ctx, CallerFilter{Dimension: "user"}, cursor, 2)
		require.NoError(t, err)
		for _, c := range cs {
			got = append(got, c.Identifier)
		}
		if page == 0 {
			_, err = d.SetTier(ctx, "t", "user", "aaron", "gold") // before the cursor: not seen
			require.NoError(t, err)
			_, err = d.SetTier(ctx, "t", "user", "bob", "") // removed
			require.NoError(t, err)
		}
		if cursor = next; cursor == "" {
			break
		}
	}
	require.Equal(t, []string{"alice", "amélie", "carol"}, got)

	_, _, err = d.ListCallers(ctx, CallerFilter{}, "bm90IGEgY3Vyc29y", 10)
	require.ErrorIs(t, err, ErrCursor)
	_, _, err = d.ListCallers(ctx, CallerFilter{Identifier: "a\x00"}, "", 10)
	require.ErrorIs(t, err, ErrInvalid)
	_, _, err = d.ListCallers(ctx, CallerFilter{}, "", MaxPage+1)
	require.Error(t, err)
}
