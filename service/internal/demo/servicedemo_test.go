package demo_test

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/internal/ratelimitdtest"
)

// The default addresses of `make service-demo`.
const (
	defaultGRPC = "127.0.0.1:8081"
	defaultHTTP = "127.0.0.1:8080"
)

// TestServiceDemo runs `make service-demo`'s script (scripts/service-demo.sh)
// with a ratelimitd built for the test: when its default ports are taken it
// serves on ports the kernel chooses and says where; addresses given in
// GRPC_ADDR and HTTP_ADDR are used as given, and one that is taken is an
// error, not a fallback. Each run checks one user 11 times over gRPC and
// another over HTTP: 8 allowed, 2 warnings and a denial each, and leaves no
// ratelimitd behind.
func TestServiceDemo(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	bin, err := ratelimitdtest.Build(ctx, "../../cmd/ratelimitd", t.TempDir())
	require.NoError(t, err)

	t.Run("defaults taken", func(t *testing.T) {
		// Taken by this test, or by another program: taken either way.
		heldGRPC, heldHTTP := hold(t, defaultGRPC), hold(t, defaultHTTP)
		out, err := runDemo(t, bin)
		require.NoError(t, err, out)
		grpcAddr, httpAddr := served(t, out)
		if heldGRPC && heldHTTP { // nobody can have freed them during the run
			require.Contains(t, out, "127.0.0.1:8081 or 127.0.0.1:8080 is taken: serving on ports the kernel chooses\n")
			require.NotEqual(t, defaultGRPC, grpcAddr)
			require.NotEqual(t, defaultHTTP, httpAddr)
		}
		requireChecks(t, out, grpcAddr, httpAddr)
	})
	t.Run("addresses given", func(t *testing.T) {
		grpcAddr, httpAddr := freeAddr(t), freeAddr(t)
		out, err := runDemo(t, bin, "GRPC_ADDR="+grpcAddr, "HTTP_ADDR="+httpAddr)
		require.NoError(t, err, out)
		require.NotContains(t, out, "is taken")
		gotGRPC, gotHTTP := served(t, out)
		require.Equal(t, grpcAddr, gotGRPC)
		require.Equal(t, httpAddr, gotHTTP)
		requireChecks(t, out, grpcAddr, httpAddr)
	})
	t.Run("address given and taken", func(t *testing.T) {
		taken := freeAddr(t)
		require.True(t, hold(t, taken))
		out, err := runDemo(t, bin, "GRPC_ADDR="+taken, "HTTP_ADDR="+freeAddr(t))
		require.Error(t, err, out)
		require.Contains(t, out, "ratelimitd did not start:")
		require.Contains(t, out, taken, "the log says which address")
		require.NotContains(t, out, "kernel chooses")
	})
}

// runDemo runs the script with env added (GRPC_ADDR, HTTP_ADDR and
// RATELIMITD of the test's own environment left out) and returns its
// output, stdout and stderr together.
func runDemo(t *testing.T, bin string, env ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "../../../scripts/service-demo.sh")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GRPC_ADDR=") && !strings.HasPrefix(kv, "HTTP_ADDR=") && !strings.HasPrefix(kv, "RATELIMITD") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(append(cmd.Env, "RATELIMITD="+bin), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// served returns the addresses the demo said it serves on.
func served(t *testing.T, out string) (grpcAddr, httpAddr string) {
	t.Helper()
	m := regexp.MustCompile(`(?m)^ratelimitd serves gRPC on (127\.0\.0\.1:\d+) and HTTP on (127\.0\.0\.1:\d+) \(`).FindStringSubmatch(out)
	require.NotNil(t, m, "the demo does not say where it serves:\n%s", out)
	return m[1], m[2]
}

// requireChecks requires the demo's two series of checks, on the addresses
// it said, and that its ratelimitd is gone.
func requireChecks(t *testing.T, out, grpcAddr, httpAddr string) {
	t.Helper()
	require.Contains(t, out, "== gRPC: ratelimitd check --addr "+grpcAddr+" --identifier bob")
	require.Contains(t, out, "== HTTP: POST http://"+httpAddr+"/api/v1/rate-limit/check")
	for word, n := range map[string]int{"allowed": 16, "warning": 4, "denied": 2} {
		require.Len(t, regexp.MustCompile(`(?m)^`+word+` `).FindAllString(out, -1), n, "%s lines:\n%s", word, out)
	}
	for _, a := range []string{grpcAddr, httpAddr} {
		if c, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			_ = c.Close()
			t.Fatalf("%s still accepts connections after the demo", a)
		}
	}
}

// hold listens on addr until the test ends and reports whether it could
// (false: another program holds it).
func hold(t *testing.T, addr string) bool {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	t.Cleanup(func() { _ = l.Close() })
	return true
}

// freeAddr is a loopback address free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}
