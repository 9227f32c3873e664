package main

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/internal/daemon"
	"github.com/sluicehq/sluice/service/internal/pgtest"
	"github.com/sluicehq/sluice/service/internal/ratelimitdtest"
)

// binary is the ratelimitd built once for this test binary by TestMain:
// the tests of the process itself (its signals, exit codes and stderr) and
// of the client subcommands run it.
var binary string

// pg is one PostgreSQL server for this test binary (a database per test).
var pg *pgtest.Shared

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	// As main does: go-redis's own lines would land amid the tests'
	// output when a test kills its Redis.
	redis.SetLogger(quietRedis{})
	dir, err := os.MkdirTemp("", "ratelimitd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	binary, err = ratelimitdtest.Build(ctx, ".", dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	pg = pgtest.StartShared()
	defer pg.Close()
	return m.Run()
}

// instance is a running ratelimitd: its daemon in this process
// (startServer) or the binary in a child process (ratelimitdtest.Start).
type instance interface {
	URL(path string) string
	Logs() string
}

// startServer runs `ratelimitd serve args...` in this process: serve's
// own reading of its flags and environment (env holds its only
// RATELIMITD_ variables), completed by ratelimitdtest.ServeArgs (loopback
// ports the kernel picks, no drain delay, JSON logs), then the daemon that
// serve runs, closed when the test ends.
func startServer(t *testing.T, env map[string]string, args ...string) *ratelimitdtest.Daemon {
	t.Helper()
	return ratelimitdtest.StartDaemon(t, serverConfig(t, env, args...))
}

// serverConfig is the Config startServer runs.
func serverConfig(t *testing.T, env map[string]string, args ...string) daemon.Config {
	t.Helper()
	_, c, err := parseServe(ratelimitdtest.ServeArgs(args...), envMap(env))
	require.NoError(t, err)
	return c
}
