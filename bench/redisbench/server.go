package redisbench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Environment variables that override the binaries' paths; RequireEnv=1
// turns a missing or unstartable redis-server from a skip into a failure in
// the go test benchmarks (as everywhere in sluice).
const (
	ServerEnv    = "REDIS_SERVER"
	BenchmarkEnv = "REDIS_BENCHMARK"
	RequireEnv   = "SLUICE_REQUIRE_REDIS"
)

// FindBinary returns $env if set, else name looked up on PATH.
func FindBinary(env, name string) (string, error) {
	if p := os.Getenv(env); p != "" {
		return p, nil
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s not found on PATH (set %s): %w", name, env, err)
	}
	return p, nil
}

// Server is a redis-server process of our own on a free 127.0.0.1 port,
// without persistence. Close kills it.
type Server struct {
	Addr string
	Port int

	cmd  *exec.Cmd
	dir  string
	out  *capped
	done chan struct{} // closed once the process has been reaped
	once sync.Once

	adminOnce sync.Once
	admin     *redis.Client
}

// Admin returns a client for the harness's own commands (FLUSHALL, INFO,
// SCRIPT LOAD), separate from the clients under measurement.
func (s *Server) Admin() *redis.Client {
	s.adminOnce.Do(func() { s.admin = redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: 2}) })
	return s.admin
}

// StartServer starts bin on a free loopback port (--save "" --appendonly
// no) and waits until it answers PING.
func StartServer(bin string) (*Server, error) {
	var last error
	for range 5 { // another process may take the port between probe and bind
		s, err := startOnce(bin)
		if err == nil {
			return s, nil
		}
		last = err
		if !strings.Contains(err.Error(), "in use") {
			break
		}
	}
	return nil, last
}

func startOnce(bin string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sluice-bench-redis-")
	if err != nil {
		return nil, err
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Port: port, dir: dir, out: &capped{max: 16 << 10}, done: make(chan struct{})}
	s.cmd = exec.Command(bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--protected-mode", "yes",
		"--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no", "--logfile", "")
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	setDeathSignal(s.cmd)
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()

	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err = c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return s, nil
		}
		select {
		case <-s.done:
			s.Close()
			out := s.out.String()
			if strings.Contains(out, "Address already in use") {
				return nil, fmt.Errorf("redis-server: port %d in use", port)
			}
			return nil, fmt.Errorf("redis-server exited before answering PING:\n%s", out)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Close()
			return nil, fmt.Errorf("redis-server on %s did not answer PING within 5s: %v\n%s", s.Addr, err, s.out.String())
		}
	}
}

// PID is the server's process id (for its CPU time in /proc).
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Close kills the server, waits for it and removes its directory.
func (s *Server) Close() error {
	s.once.Do(func() {
		if s.admin != nil {
			s.admin.Close()
		}
		_ = s.cmd.Process.Kill()
		<-s.done
		os.RemoveAll(s.dir)
	})
	return nil
}

// StartServerTB starts a server for a benchmark or test and kills it on
// cleanup. Without redis-server it skips (message mentions redis), or fails
// when SLUICE_REQUIRE_REDIS=1.
func StartServerTB(tb testing.TB) *Server {
	tb.Helper()
	bin, err := FindBinary(ServerEnv, "redis-server")
	if err == nil {
		var s *Server
		if s, err = StartServer(bin); err == nil {
			tb.Cleanup(func() { s.Close() })
			return s
		}
	}
	if os.Getenv(RequireEnv) == "1" {
		tb.Fatalf("redis benchmark: %v", err)
	}
	tb.Skipf("skipping redis benchmark: %v (set %s=1 to make this a failure)", err, RequireEnv)
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// capped keeps the first max bytes written to it.
type capped struct {
	mu  sync.Mutex
	b   []byte
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - len(c.b); room > 0 {
		c.b = append(c.b, p[:min(len(p), room)]...)
	}
	return len(p), nil
}

func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return string(c.b)
}

// Version returns the server's redis_version, or "?".
func (s *Server) Version(ctx context.Context) string {
	info, err := s.Admin().Info(ctx, "server").Result()
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "redis_version:"); ok {
			return v
		}
	}
	return "?"
}

// CPU returns the CPU time (user and system, every thread) redis-server
// has used since it started, from INFO cpu: to the microsecond, where
// /proc/PID/stat counts 10 ms ticks (a short run may span none).
func (s *Server) CPU(ctx context.Context) (time.Duration, error) {
	info, err := s.Admin().Info(ctx, "cpu").Result()
	if err != nil {
		return 0, fmt.Errorf("INFO cpu: %w", err)
	}
	var total time.Duration
	found := 0
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "used_cpu_sys" && k != "used_cpu_user") {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu: %s %q: %w", k, v, err)
		}
		total += time.Duration(f * 1e9)
		found++
	}
	if found != 2 {
		return 0, fmt.Errorf("INFO cpu: used_cpu_sys and used_cpu_user: %d of 2 found", found)
	}
	return total, nil
}
