package rulesdb

import (
	"context"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// killedChildEnv tells the test binary, re-executed as a child, which
// request to start and where to die (see TestKilledMidRequest).
const killedChildEnv = "RULESDB_KILLED_CHILD"

// killedChild is TestKilledMidRequest in the child process: it claims an
// idempotency key on the database at $RULESDB_KILLED_DSN and SIGKILLs
// itself, before its write ("claimed") or after the write committed and
// before the response was stored ("written").
func killedChild(t *testing.T, where string) {
	ctx := context.Background()
	d, err := Open(ctx, os.Getenv("RULESDB_KILLED_DSN"))
	require.NoError(t, err)
	s, err := d.BeginIdempotent(ctx, "ci", where, []byte(where))
	require.NoError(t, err)
	require.Nil(t, s)
	if where == "written" {
		_, err = d.Create(WithRequestID(WithIdempotency(ctx, "ci", where), "req-killed"), "ci", sample("killed"))
		require.NoError(t, err)
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	time.Sleep(time.Minute)
}

// TestKilledMidRequest: a process killed mid-request leaves the key
// recoverable: killed before its write, the key is claimable once the
// in-flight bound has passed and nothing was written; killed after the
// write committed, the write and its audit row are whole, and a replay is
// told it was applied instead of running again.
func TestKilledMidRequest(t *testing.T) {
	if where := os.Getenv(killedChildEnv); where != "" {
		killedChild(t, where)
		return
	}
	each(t, testKilledMidRequest)
}

func testKilledMidRequest(t *testing.T, dsn string) {
	for _, where := range []string{"claimed", "written"} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestKilledMidRequest$", "-test.count=1")
		cmd.Env = append(os.Environ(), killedChildEnv+"="+where, "RULESDB_KILLED_DSN="+dsn)
		out, err := cmd.CombinedOutput()
		cancel()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, string(out))
		require.Equal(t, syscall.SIGKILL, exit.Sys().(syscall.WaitStatus).Signal(), string(out))
	}

	ctx := tctx(t)
	d := open(t, dsn)
	rev, err := d.Revision(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, rev, "one write: the second child's")
	r, err := d.Get(ctx, "killed")
	require.NoError(t, err)
	require.EqualValues(t, 1, r.Revision)
	es, err := d.Audit(ctx, 0, 10)
	require.NoError(t, err)
	require.Len(t, es, 1)
	require.Equal(t, "req-killed", es[0].RequestID)

	// Within the bound, both keys look in flight.
	for _, k := range []string{"claimed", "written"} {
		_, err := d.BeginIdempotent(ctx, "ci", k, []byte(k))
		require.ErrorIs(t, err, ErrIdempotencyInFlight, k)
	}
	later := time.Now().Add(IdempotencyAbandoned + time.Second)
	d.now = func() time.Time { return later }
	s, err := d.BeginIdempotent(ctx, "ci", "claimed", []byte("claimed"))
	require.NoError(t, err)
	require.Nil(t, s, "killed before its write: the retry runs")
	s, err = d.BeginIdempotent(ctx, "ci", "written", []byte("written"))
	require.NoError(t, err)
	require.Equal(t, 409, s.Status, "killed after its write: not run again")
	require.Contains(t, string(s.Body), "revision 1")
}
