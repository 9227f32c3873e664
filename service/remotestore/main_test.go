package remotestore_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/service/remotestore"
)

// serveEnv, set to a Redis address, makes the test binary a StoreService
// on a Redis store on that address instead of running tests: a server in a
// process of its own, as ratelimitd is, so that a benchmark's allocations
// are the client's alone.
const serveEnv = "SLUICE_REMOTESTORE_SERVE_REDIS"

func TestMain(m *testing.M) {
	if addr := os.Getenv(serveEnv); addr != "" {
		os.Exit(serveRedis(addr))
	}
	code := m.Run()
	removeRatelimitd()
	os.Exit(code)
}

// serveRedis serves on a loopback port, printed on the first line of
// standard output, until standard input closes.
func serveRedis(addr string) int {
	client := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64})
	defer client.Close()
	rs, err := redisstore.New(client, redisstore.WithTimeout(5*time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer rs.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv := grpc.NewServer()
	remotestore.NewServer(rs).Register(srv)
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		srv.Stop()
	}()
	fmt.Println(ln.Addr().String())
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// serveProcess starts this test binary as a StoreService on the Redis at
// redisAddr and returns its address; it is stopped at the test's end.
func serveProcess(t testing.TB, redisAddr string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serveEnv+"="+redisAddr)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	return strings.TrimSpace(line)
}
