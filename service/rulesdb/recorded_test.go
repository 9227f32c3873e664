package rulesdb

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// Record writes exactly one audit row for a change it applies (actor,
// action, target, after, the request id), none when apply fails (its
// error returned), does not apply when the row cannot be written, and
// reports ErrNotRecorded when apply made the change but the commit failed.
// An incremental load reads past its rows.
func TestRecord(t *testing.T) { each(t, testRecord) }

func testRecord(t *testing.T, dsn string) {
	ctx := tctx(t)
	d := open(t, dsn)
	src := open(t, dsn).Source(0)
	_, err := src.Load(ctx)
	require.NoError(t, err)

	applied := 0
	apply := func(context.Context) error { applied++; return nil }
	rctx := WithRequestID(ctx, "req-7")
	require.NoError(t, d.Record(rctx, "ops", ActionStoreReset, "store/alice/p", nil, map[string]int{"rate": 5}, apply))
	require.Equal(t, 1, applied)
	rows, err := d.Audit(ctx, 0, 100)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	e := rows[0]
	require.Equal(t, AuditEntry{Revision: 1, At: e.At, Actor: "ops", Action: ActionStoreReset, Target: "store/alice/p",
		After: []byte(`{"rate":5}`), RequestID: "req-7"}, e)

	// apply fails: its error, no row.
	boom := errors.New("store down")
	err = d.Record(ctx, "ops", ActionStoreOverrideSet, "store/alice/p", nil, nil, func(context.Context) error { return boom })
	require.ErrorIs(t, err, boom)
	// Refused before anything: no actor, an action Record does not write.
	require.Error(t, d.Record(ctx, " ", ActionLimitReset, "limit/user/a", nil, nil, apply))
	require.Error(t, d.Record(ctx, "ops", "rule.delete", "rule/a", nil, nil, apply))
	// The commit fails after apply (the context ends in it): the change
	// was made, its row is lost, and the error says so.
	cctx, cancel := context.WithCancel(ctx)
	err = d.Record(cctx, "ops", ActionStoreOverrideClear, "store/alice/p", nil, nil, func(context.Context) error { cancel(); return nil })
	require.ErrorIs(t, err, ErrNotRecorded)
	// The database closed: nothing applied.
	closed := open(t, dsn)
	require.NoError(t, closed.Close())
	require.Error(t, closed.Record(ctx, "ops", ActionStoreReset, "store/alice/p", nil, nil, apply))
	require.Equal(t, 1, applied)

	rows, err = d.Audit(ctx, 0, 100)
	require.NoError(t, err)
	require.Len(t, rows, 1, "one row: the change that was made and committed")

	// Every action Record writes is known to incremental loads.
	for action := range recordedActions {
		require.NoError(t, d.Record(ctx, "ops", action, "t", nil, nil, apply))
	}
	_, err = src.Load(ctx)
	require.NoError(t, err)
	src.mu.Lock()
	defer src.mu.Unlock()
	require.Equal(t, loadCounts{full: 1, incremental: 1}, src.loads)
}
