package rulesdb

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A listener whose connection goes silent (black-holed, then healed with
// the server's side gone: a connection that would wait forever) is found
// out by its probe, reported down, re-established and reported up with one
// more reconnect; the full reload after it brings the change made
// meanwhile, and the next change arrives by NOTIFY (the poll is an hour).
func TestListenerProbedAndReestablished(t *testing.T) {
	ctx := tctx(t)
	dsn := pg.NewDatabase(t)
	proxy, via := throughProxy(t, dsn)
	a := open(t, dsn)
	const timeout = 300 * time.Millisecond
	b, err := Open(ctx, via, WithTimeout(timeout))
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	r, err := a.Create(ctx, "alice", sample("orders"))
	require.NoError(t, err)
	src := b.Source(time.Hour)
	_, err = src.Load(ctx)
	require.NoError(t, err)
	require.Equal(t, ListenerState{Enabled: true}, src.Listener(), "before Watch: not listening yet")
	f := &inForce{}
	runWatch(t, src, f)
	require.Eventually(t, func() bool { return src.Listener().Up }, 10*time.Second, 10*time.Millisecond)
	up := src.Listener()
	require.Zero(t, up.Reconnects)
	change := func(limit int64) string {
		t.Helper()
		r.Limit = limit
		r, err = a.Update(ctx, "alice", *r, "*")
		require.NoError(t, err)
		return strconv.FormatInt(r.Revision, 10)
	}
	rev := change(11)
	require.Eventually(t, func() bool { return f.revision() == rev }, time.Second, 5*time.Millisecond, "by NOTIFY")

	proxy.Stall()
	stalled := time.Now()
	require.Eventually(t, func() bool { return !src.Listener().Up }, 2*timeout+time.Second, 10*time.Millisecond, "down during the partition")
	down := src.Listener()
	require.False(t, down.Since.Before(stalled))
	rev = change(12)

	proxy.Sever()
	require.Eventually(t, func() bool { return src.Listener().Up }, 10*time.Second, 10*time.Millisecond, "up after the heal")
	require.EqualValues(t, 1, src.Listener().Reconnects)
	require.Eventually(t, func() bool { return f.revision() == rev }, 2*time.Second, 5*time.Millisecond, "the full reload after the reconnect")
	rev = change(13)
	require.Eventually(t, func() bool { return f.revision() == rev }, time.Second, 5*time.Millisecond, "by NOTIFY after the heal")

	sq := open(t, "file:"+t.TempDir()+"/rules.db").Source(0)
	require.Equal(t, ListenerState{}, sq.Listener(), "SQLite has no listener")
}
