// Package redistest starts real redis-server processes for Go tests: single
// servers, Redis Cluster deployments and Sentinel-managed master/replica
// pairs. It does not mock anything.
//
// Every process listens on 127.0.0.1 only, on a port chosen by the harness,
// runs in its own temporary directory (t.TempDir) with persistence disabled
// (save "", appendonly no), logs to a file in that directory and is killed
// (SIGKILL to its process group, then reaped) by a t.Cleanup registered
// before the process starts, so no process outlives the test even when it
// fails or panics. On Linux the processes also get PR_SET_PDEATHSIG=SIGKILL,
// so they die with the test binary if it exits without running cleanups
// (for example when go test's -timeout fires).
//
// Environment:
//
//   - REDIS_SERVER: path of the redis-server binary (default: looked up in
//     PATH, then /usr/bin and /usr/local/bin).
//   - SLUICE_REQUIRE_REDIS=1: a missing binary or a server that cannot start
//     fails the test (t.Fatalf). Without it such tests are skipped (t.Skipf
//     with a message mentioning redis), so `go test ./...` works on machines
//     without Redis.
//
// All helpers that take a testing.TB may call t.Fatalf or t.Skipf and must
// therefore be called from the test's own goroutine. Server.Kill, Server.Stop,
// Server.Pid and Sentinel.CurrentMaster may be called from any goroutine.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// RequireEnv is the environment variable that turns "redis unavailable" from
// a skip into a test failure when set to "1".
const RequireEnv = "SLUICE_REQUIRE_REDIS"

// BinaryEnv is the environment variable that overrides the redis-server path.
const BinaryEnv = "REDIS_SERVER"

// Required reports whether Redis tests must run, that is whether
// SLUICE_REQUIRE_REDIS=1. When true, a missing redis-server binary or a
// server that cannot start fails the test instead of skipping it.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// unavailable skips the test, or fails it when Redis is required.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if Required() {
		t.Fatalf("redistest: %s (%s=1, so redis tests must run)", msg, RequireEnv)
	}
	t.Skipf("redistest: skipping redis test: %s (set %s=1 to make this a failure)", msg, RequireEnv)
}

// Binary returns the path of the redis-server binary, honouring the
// REDIS_SERVER environment variable. If no usable binary is found the test
// is skipped, or fails when SLUICE_REQUIRE_REDIS=1.
func Binary(t testing.TB) string {
	t.Helper()
	bin, _ := binary(t)
	return bin
}

// binary is Binary plus the server's major version.
func binary(t testing.TB) (string, int) {
	t.Helper()
	bin, err := findBinary()
	if err != nil {
		unavailable(t, "%v", err)
		return "", 0 // not reached
	}
	major, err := serverMajor(bin)
	if err != nil {
		unavailable(t, "%v", err)
		return "", 0 // not reached
	}
	if major < 5 {
		unavailable(t, "%s is Redis %d; redistest needs Redis 5 or newer", bin, major)
	}
	return bin, major
}

func findBinary() (string, error) {
	if p := os.Getenv(BinaryEnv); p != "" {
		path, err := exec.LookPath(p)
		if err != nil {
			return "", fmt.Errorf("redis-server from %s=%q is not usable: %w", BinaryEnv, p, err)
		}
		return path, nil
	}
	if path, err := exec.LookPath("redis-server"); err == nil {
		return path, nil
	}
	for _, p := range []string{"/usr/bin/redis-server", "/usr/local/bin/redis-server"} {
		if path, err := exec.LookPath(p); err == nil {
			return path, nil
		}
	}
	return "", fmt.Errorf("redis-server binary not found in PATH (set %s to its path)", BinaryEnv)
}

var (
	versionMu    sync.Mutex
	versionCache = map[string]int{}
	versionRE    = regexp.MustCompile(`v=(\d+)\.`)
)

// serverMajor runs `redis-server --version` (once per path) and returns the
// major version.
func serverMajor(bin string) (int, error) {
	versionMu.Lock()
	defer versionMu.Unlock()
	if v, ok := versionCache[bin]; ok {
		return v, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("%s --version failed: %v: %s", bin, err, strings.TrimSpace(string(out)))
	}
	m := versionRE.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("%s --version: cannot parse %q", bin, strings.TrimSpace(string(out)))
	}
	v, _ := strconv.Atoi(string(m[1]))
	versionCache[bin] = v
	return v, nil
}

// reservedDirectives are managed by the harness and may not be overridden by
// extra arguments.
var reservedDirectives = map[string]bool{
	"port": true, "bind": true, "dir": true, "logfile": true, "daemonize": true,
	"cluster-config-file": true, "include": true, "unixsocket": true,
}

// argsToConf converts command-line style arguments ("--maxmemory", "1mb",
// "--save", "") into redis.conf lines, the same way redis-server does.
func argsToConf(args []string) ([]string, error) {
	var lines []string
	for _, a := range args {
		if strings.HasPrefix(a, "--") && len(a) > 2 {
			name := strings.ToLower(a[2:])
			if reservedDirectives[name] {
				return nil, fmt.Errorf("redistest: directive %q is managed by the harness and cannot be set", a)
			}
			lines = append(lines, name)
			continue
		}
		if len(lines) == 0 {
			return nil, fmt.Errorf("redistest: extra arguments must start with a --directive, got %q", a)
		}
		lines[len(lines)-1] += " " + quoteConf(a)
	}
	return lines, nil
}

// quoteConf quotes a value for redis.conf (sdssplitargs syntax).
func quoteConf(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\', '"':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if c < 0x20 || c >= 0x7f {
				fmt.Fprintf(&b, `\x%02x`, c)
			} else {
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// errConfig marks a configuration error: always a test bug, never skipped.
var errConfig = errors.New("redis-server rejected its configuration")

// startFailed reports a failure to bring up a server: a configuration error
// always fails the test; anything else follows the Required rule.
func startFailed(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, errConfig) {
		t.Fatalf("redistest: %v", err)
	}
	unavailable(t, "redis-server could not start: %v", err)
}
