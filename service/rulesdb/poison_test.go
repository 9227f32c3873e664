package rulesdb

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestOverrideTheEngineWouldRefuse: SetOverride stores nothing the
// snapshot would refuse (an identifier over 1024 bytes made every later
// load fail: the instances kept their old rules forever, a poisoned
// database); the refusal names the field and writes nothing.
func TestOverrideTheEngineWouldRefuse(t *testing.T) { each(t, testOverrideTheEngineWouldRefuse) }

func testOverrideTheEngineWouldRefuse(t *testing.T, dsn string) {
	ctx := tctx(t)
	d := open(t, dsn)
	_, err := d.Create(ctx, "alice", sample("orders"))
	require.NoError(t, err)
	rev, err := d.Revision(ctx)
	require.NoError(t, err)
	o := Override{Dimension: "user", Identifier: strings.Repeat("x", 1025), RuleID: "orders", Block: true, ExpiresAt: time.Now().Add(time.Hour)}
	_, err = d.SetOverride(ctx, "alice", o)
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, "identifier")
	after, err := d.Revision(ctx)
	require.NoError(t, err)
	require.Equal(t, rev, after, "nothing written")
	_, err = d.Source(0).Load(ctx)
	require.NoError(t, err)

	o.Identifier = strings.Repeat("x", 1024)
	_, err = d.SetOverride(ctx, "alice", o)
	require.NoError(t, err)
	s, err := d.Source(0).Load(ctx)
	require.NoError(t, err)
	_, ok := s.OverrideOf("orders", "user", o.Identifier)
	require.True(t, ok)

	// A row stored before the check (in force, and cleared) is left out
	// of the snapshot, never a load that fails.
	long := strings.Repeat("y", 2000)
	for i, cleared := range []any{nil, time.Now().UnixMilli()} {
		_, err = d.db.ExecContext(ctx, d.q(`INSERT INTO overrides (dimension, identifier, rule_id, "limit", window_seconds, block, expires_at, revision, created_at, cleared_at)
			VALUES (?, ?, ?, 0, 0, TRUE, ?, 1, 0, ?)`), "user", long+strings.Repeat("z", i), "orders", time.Now().Add(time.Hour).UnixMilli(), cleared)
		require.NoError(t, err)
	}
	s, err = d.Source(0).Load(ctx)
	require.NoError(t, err)
	_, ok = s.OverrideOf("orders", "user", long)
	require.False(t, ok)
}
