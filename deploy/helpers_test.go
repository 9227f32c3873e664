package deploy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// RequireToolsEnv, set to 1 (as `make test` does), makes a test whose
// tool (promtool, systemd-analyze) is missing fail instead of skip.
const RequireToolsEnv = "SLUICE_REQUIRE_DEPLOY_TOOLS"

// requireRedisEnv is the repository's switch for Redis: set to 1, a test
// that cannot start redis-server fails.
const requireRedisEnv = "SLUICE_REQUIRE_REDIS"

// unavailable skips t, or fails it when env is 1.
func unavailable(t *testing.T, env, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv(env) == "1" {
		t.Fatalf("%s (%s=1, so this test must run: ./scripts/ensure-deploy-tools.sh installs the tools)", msg, env)
	}
	t.Skipf("%s (set %s=1 to make this a failure)", msg, env)
}

// tool returns the path of the named program, or ends the test (see
// unavailable).
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		unavailable(t, RequireToolsEnv, "%s not found", name)
	}
	return p
}

// run runs a command bounded by a minute and returns its combined output
// and exit code (-1: it could not run or was killed).
func run(t *testing.T, dir, name string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit) && ctx.Err() == nil:
		return string(out), exit.ExitCode()
	}
	return string(out) + err.Error(), -1
}

var built struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// ratelimitd builds ../service/cmd/ratelimitd once per test binary and
// returns its path.
func ratelimitd(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "deploy-ratelimitd-")
		if built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "ratelimitd")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", built.bin, "./cmd/ratelimitd")
		cmd.Dir = filepath.Join("..", "service")
		if out, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build ./cmd/ratelimitd: %w\n%s", err, out)
		}
	})
	require.NoError(t, built.err)
	return built.bin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// proc is one running `ratelimitd serve`.
type proc struct {
	cmd                *exec.Cmd
	grpcAddr, httpAddr string
	logs               *syncBuffer
	done               chan struct{}
	exit               int
}

// serve starts bin with args (serve's, as given: the caller sets the
// addresses) and env added to a copy of the test's environment less its
// RATELIMITD_ variables, waits until it logs that it serves (JSON logs:
// args must hold --log-format json) and kills it when the test ends.
func serve(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RATELIMITD_") && !strings.HasPrefix(kv, "GOMEMLIMIT=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	p := &proc{cmd: cmd, logs: &syncBuffer{}, done: make(chan struct{}), exit: -1}
	cmd.Stdout = p.logs
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	ready := make(chan [2]string, 1)
	go p.read(stderr, ready)
	select {
	case a := <-ready:
		p.grpcAddr, p.httpAddr = a[0], a[1]
	case <-p.done:
		t.Fatalf("ratelimitd %v exited (%d) before serving:\n%s", args, p.exit, p.logs)
	case <-time.After(30 * time.Second):
		t.Fatalf("ratelimitd %v did not serve within 30s:\n%s", args, p.logs)
	}
	return p
}

// read copies the process's log lines, reports the addresses of its
// "ratelimitd serving" line to ready, and reaps the process.
func (p *proc) read(stderr io.Reader, ready chan<- [2]string) {
	sc := bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		p.logs.Write(append(line, '\n'))
		var rec struct {
			Msg      string `json:"msg"`
			GRPCAddr string `json:"grpc_addr"`
			HTTPAddr string `json:"http_addr"`
		}
		if json.Unmarshal(line, &rec) == nil && rec.Msg == "ratelimitd serving" {
			select {
			case ready <- [2]string{rec.GRPCAddr, rec.HTTPAddr}:
			default:
			}
		}
	}
	_, _ = io.Copy(p.logs, stderr)
	err := p.cmd.Wait()
	var exit *exec.ExitError
	switch {
	case err == nil:
		p.exit = 0
	case errors.As(err, &exit):
		p.exit = exit.ExitCode()
	}
	close(p.done)
}

// url is the address of path on the process's HTTP listener.
func (p *proc) url(path string) string { return "http://" + p.httpAddr + path }

// get fetches a URL, bounded by 5 seconds.
func get(t *testing.T, u string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// redis starts a redis-server on a free loopback port (no persistence),
// stopped when the test ends, and returns its address. Without one the
// test skips, or fails under SLUICE_REQUIRE_REDIS=1.
func redis(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		unavailable(t, requireRedisEnv, "redis-server not found (./scripts/ensure-redis.sh installs it)")
	}
	for attempt := 0; ; attempt++ {
		port := freePort(t)
		cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		require.NoError(t, cmd.Start())
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if pong(addr, exited) {
			return addr
		}
		if attempt == 2 {
			t.Fatalf("redis-server did not answer PING on %s", addr)
		}
	}
}

// pong waits up to 10 s for PING to be answered at addr, or for the
// server to exit (its port was taken).
func pong(addr string, exited <-chan struct{}) bool {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return false
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(time.Second))
			_, _ = c.Write([]byte("PING\r\n"))
			buf := make([]byte, 7)
			n, _ := io.ReadFull(c, buf)
			_ = c.Close()
			if string(buf[:n]) == "+PONG\r\n" {
				return true
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(b)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// setFlags returns args with the value of each flag in values replaced,
// whether given as --flag=value or --flag value; a flag of values that
// args lack fails the test (the file no longer says what the test
// assumes).
func setFlags(t *testing.T, args []string, values map[string]string) []string {
	t.Helper()
	out := append([]string(nil), args...)
	seen := map[string]bool{}
	for i := 0; i < len(out); i++ {
		name, _, eq := strings.Cut(out[i], "=")
		v, ok := values[name]
		if !ok {
			continue
		}
		seen[name] = true
		if eq {
			out[i] = name + "=" + v
			continue
		}
		require.Less(t, i+1, len(out), "%s has no value", name)
		out[i+1] = v
		i++
	}
	for name := range values {
		require.True(t, seen[name], "%s not in %v", name, args)
	}
	return out
}

// flagValue returns the value of --name in args (either form).
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
		if a == name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}
