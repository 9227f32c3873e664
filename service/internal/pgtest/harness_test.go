//go:build linux

package pgtest_test

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/internal/pgtest"
)

// recordingTB is a testing.TB whose Fatalf and Skipf record the message and
// end the calling goroutine, so a test can check how Start reports an
// unavailable server without failing or skipping itself.
type recordingTB struct {
	testing.TB
	mu    sync.Mutex
	fatal string
	skip  string
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.fatal = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recordingTB) Skipf(format string, args ...any) {
	r.mu.Lock()
	r.skip = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	runtime.Goexit()
}

// startIn runs pgtest.Start on its own goroutine (Fatalf and Skipf end it)
// and returns the server, if any.
func startIn(tb testing.TB) *pgtest.Server {
	var srv *pgtest.Server
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv = pgtest.Start(tb)
	}()
	<-done
	return srv
}

// TestUnavailable checks that a server that cannot start fails the test
// under SLUICE_REQUIRE_POSTGRES=1 (as under `make test`) and skips it
// otherwise, naming the cause.
func TestUnavailable(t *testing.T) {
	t.Setenv(pgtest.BinDirEnv, t.TempDir()) // holds no initdb

	t.Setenv(pgtest.RequireEnv, "1")
	required := &recordingTB{TB: t}
	require.Nil(t, startIn(required))
	require.Contains(t, required.fatal, "initdb")
	require.Contains(t, required.fatal, pgtest.RequireEnv+"=1")
	require.Empty(t, required.skip)

	t.Setenv(pgtest.RequireEnv, "")
	optional := &recordingTB{TB: t}
	require.Nil(t, startIn(optional))
	require.Contains(t, optional.skip, "PostgreSQL")
	require.Contains(t, optional.skip, "initdb")
	require.Empty(t, optional.fatal)
}

// TestCleanupStopsServer checks that the server and its backends are gone
// once the test that started it has ended.
func TestCleanupStopsServer(t *testing.T) {
	t.Parallel()
	var pid int
	var dir string
	t.Run("server", func(t *testing.T) {
		srv := pgtest.Start(t)
		pid, dir = srv.Pid(), srv.Dir()
		require.NotZero(t, pid)
		require.NoError(t, syscall.Kill(pid, 0), "the postmaster must be running during the test")
	})
	require.NotZero(t, pid)
	require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "the postmaster must be gone after the test")
	_, err := os.Stat(dir)
	require.ErrorIs(t, err, os.ErrNotExist, "the server's directory must be removed")
	// No process of the server's user with the postmaster as parent is left.
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		require.GreaterOrEqual(t, len(fields), 2)
		require.NotEqual(t, strconv.Itoa(pid), fields[1], "process %s, a backend of the stopped server, is still running", e.Name())
	}
}

// TestSharedUnavailable: a shared server that cannot start fails every
// test asking it for a database under SLUICE_REQUIRE_POSTGRES=1, and skips
// it otherwise.
func TestSharedUnavailable(t *testing.T) {
	t.Setenv(pgtest.BinDirEnv, t.TempDir()) // holds no initdb
	newDB := func(tb testing.TB, sh *pgtest.Shared) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			sh.NewDatabase(tb)
		}()
		<-done
	}
	t.Setenv(pgtest.RequireEnv, "1")
	sh := pgtest.StartShared()
	defer sh.Close()
	required := &recordingTB{TB: t}
	newDB(required, sh)
	require.Contains(t, required.fatal, "initdb")
	require.Contains(t, required.fatal, pgtest.RequireEnv+"=1")

	t.Setenv(pgtest.RequireEnv, "")
	optional := &recordingTB{TB: t}
	newDB(optional, sh)
	require.Contains(t, optional.skip, "PostgreSQL")
	require.Empty(t, optional.fatal)
}
