package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/internal/daemon"
	"github.com/sluicehq/sluice/service/internal/pgtest"
	"github.com/sluicehq/sluice/service/internal/ratelimitdtest"
)

// asMain, in the environment of this test binary, makes it ratelimitd:
// TestMain runs main instead of the tests. The tests of the process itself
// (its signals, exit codes, stderr and goroutines) run it so (bin), the
// very code under test, with no second build.
const asMain = "SLUICE_TEST_RATELIMITD_MAIN=1"

// pg is one PostgreSQL server for this test binary (a database per test).
var pg *pgtest.Shared

func TestMain(m *testing.M) {
	if k, v, _ := strings.Cut(asMain, "="); os.Getenv(k) == v {
		main()
		return
	}
	// As main does: go-redis's own lines would land amid the tests'
	// output when a test kills its Redis.
	redis.SetLogger(quietRedis{})
	pg = pgtest.StartShared()
	code := m.Run()
	pg.Close()
	os.Exit(code)
}

// bin returns the path of ratelimitd for a child process: this test
// binary, which is ratelimitd with asMain in its environment.
func bin(t *testing.T) string {
	t.Helper()
	path, err := os.Executable()
	require.NoError(t, err)
	return path
}

// runEnv runs ratelimitd (bin) with args and env as its only RATELIMITD_
// variables, within 30 s, and returns its exit code, stdout and stderr.
func runEnv(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var o, e bytes.Buffer
	cmd := exec.CommandContext(ctx, bin(t), args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RATELIMITD_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, asMain)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), o.String(), e.String()
	}
	require.NoError(t, err)
	return 0, o.String(), e.String()
}

// runCmd runs ratelimitd's command line with args in this process (run,
// which main exits with), within 30 s, env ("NAME=value") as its only
// environment; it returns the exit code, stdout and stderr.
func runCmd(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var o, e bytes.Buffer
	code = run(ctx, args, &o, &e, envMap(vars))
	return code, o.String(), e.String()
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
