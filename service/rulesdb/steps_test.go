package rulesdb

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
)

// AuditQuery refuses a bad page size, window or cursor before it asks
// the database, each error naming what was wrong.
func TestAuditQueryBadInput(t *testing.T) {
	ctx := tctx(t)
	d := open(t, sqliteOnly(t))
	_, err := d.Create(ctx, "alice", sample("a"))
	require.NoError(t, err)
	at := time.Now()
	for _, c := range []struct {
		name string
		f    AuditFilter
		want string
	}{
		{"negative limit", AuditFilter{Limit: -1}, "rulesdb: limit: must be 1 to 1000, got -1"},
		{"limit too large", AuditFilter{Limit: MaxPage + 1}, "rulesdb: limit: must be 1 to 1000, got 1001"},
		{"until at since", AuditFilter{Since: at, Until: at}, "rulesdb: until: must be after since"},
		{"until before since", AuditFilter{Since: at, Until: at.Add(-time.Second)}, "rulesdb: until: must be after since"},
		{"cursor of the other order", AuditFilter{Newest: true, Cursor: encodeCursor("a", "1")}, ErrCursor.Error()},
		{"cursor of rules", AuditFilter{Cursor: encodeCursor("r", "1")}, ErrCursor.Error()},
		{"cursor not a revision", AuditFilter{Cursor: encodeCursor("a", "x")}, ErrCursor.Error()},
		{"negative revision", AuditFilter{Cursor: encodeCursor("a", "-1")}, ErrCursor.Error()},
		{"cursor not base64", AuditFilter{Cursor: "!!"}, ErrCursor.Error()},
	} {
		t.Run(c.name, func(t *testing.T) {
			es, next, err := d.AuditQuery(ctx, c.f)
			require.EqualError(t, err, c.want)
			require.Nil(t, es)
			require.Empty(t, next)
		})
	}
	es, next, err := d.AuditQuery(ctx, AuditFilter{Cursor: encodeCursor("a", "0")})
	require.NoError(t, err, "a cursor before every revision")
	require.Len(t, es, 1)
	require.Empty(t, next)
}

// Import needs an actor and writes nothing without one.
func TestImportNeedsAnActor(t *testing.T) {
	ctx := tctx(t)
	d := open(t, sqliteOnly(t))
	n, err := d.Import(ctx, " ", []Rule{sample("a")})
	require.EqualError(t, err, "rulesdb: actor: required")
	require.Zero(t, n)
	all, err := d.All(ctx)
	require.NoError(t, err)
	require.Empty(t, all)
}

// snapshotAt reports every bad row, the tier rows' included, and leaves
// out the overrides expired at now without an error.
func TestSnapshotAtRows(t *testing.T) {
	base, gold := sample("base"), sample("base-gold")
	gold.Tier = "gold"
	badGold := gold
	badGold.ID, badGold.Tier, badGold.WindowSeconds = "bad-gold", "silver", 0
	disabled := sample("off")
	disabled.Enabled, disabled.Algorithm = false, "magic" // never read
	badBase := sample("bad-base")
	badBase.EndpointPattern, badBase.Algorithm = "/other/**", "magic"
	_, _, err := snapshotAt("1", []*Rule{&base, &badBase, &gold, &badGold, &disabled}, nil, nil, time.Now())
	require.ErrorIs(t, err, ErrInvalid)
	lines := strings.Split(err.Error(), "\n")
	require.Len(t, lines, 2, err.Error())
	require.Contains(t, lines[0], `rule "bad-base": algorithm`)
	require.Contains(t, lines[1], `rule "bad-gold": window_seconds`)

	now := time.Now()
	ovs := []Override{
		{Dimension: "user", Identifier: "gone", RuleID: "base", Limit: 5, WindowSeconds: 60, ExpiresAt: now},
		{Dimension: "user", Identifier: "ann", RuleID: "base", Limit: 5, WindowSeconds: 60, ExpiresAt: now.Add(time.Hour)},
		{Dimension: "user", Identifier: "bob", RuleID: "missing", Block: true, ExpiresAt: now.Add(time.Hour)},
	}
	s, skipped, err := snapshotAt("2", []*Rule{&base, &gold}, nil, ovs, now)
	require.NoError(t, err)
	require.Len(t, skipped, 1, "the expired one is no error")
	require.ErrorContains(t, skipped[0], `rule_id: rule "missing" is not served`)
	require.Len(t, s.Overrides(), 1)
	require.Equal(t, "ann", s.Overrides()[0].Identifier)
	r, ok := s.Rule("base")
	require.True(t, ok)
	require.Equal(t, core.Limit{Algorithm: core.SlidingWindowCounter, Rate: 100, Period: time.Minute}, r.Tiers["gold"])
}
