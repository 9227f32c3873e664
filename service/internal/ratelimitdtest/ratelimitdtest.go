// Package ratelimitdtest runs ratelimitd for tests: the binary as a
// process (Build, Start), or its daemon in the test's own process
// (StartDaemon), on loopback, on ports the kernel picks, with its logs
// kept, and stopped when the test ends. Nothing is mocked: the tests talk
// to the real service over real sockets.
package ratelimitdtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// StartTimeout bounds how long Start waits for the service to serve.
const StartTimeout = 20 * time.Second

// Build compiles the ratelimitd command (package pkg, a directory, e.g.
// "." from cmd/ratelimitd's own tests) into dir and returns the binary's
// path. Call it once per test binary (from TestMain) and share the path.
func Build(ctx context.Context, pkg, dir string) (string, error) {
	bin := filepath.Join(dir, "ratelimitd")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
	}
	return bin, nil
}

// Process is one running `ratelimitd serve`.
type Process struct {
	// GRPCAddr and HTTPAddr are where it listens (127.0.0.1:port).
	GRPCAddr, HTTPAddr string

	cmd  *exec.Cmd
	logs *syncBuffer
	done chan struct{}
	err  error // Wait's result, valid after done is closed
}

// Start runs `bin serve` with ServeArgs(args...) (JSON logs, and unless
// args set them loopback ports the kernel picks and no drain delay). env
// is added to the process's environment (the RATELIMITD_
// variables of the test's own environment are removed first). It waits
// until the service logs that it serves, and kills it on test cleanup.
func Start(t testing.TB, bin string, env []string, args ...string) *Process {
	t.Helper()
	p, err := start(bin, env, args)
	if p != nil {
		t.Cleanup(func() { p.kill() })
	}
	if err != nil {
		t.Fatalf("ratelimitdtest: %v", err)
	}
	return p
}

func has(args []string, flag string) bool {
	for _, a := range args {
		if a == flag || strings.HasPrefix(a, flag+"=") {
			return true
		}
	}
	return false
}

// ServeArgs returns the flags of `ratelimitd serve` as the tests run it:
// --log-format json, then --grpc-addr and --http-addr on 127.0.0.1:0 and
// --drain-delay 0s unless args give them, then args.
func ServeArgs(args ...string) []string {
	full := []string{"--log-format", "json"}
	for _, d := range [][2]string{{"--grpc-addr", "127.0.0.1:0"}, {"--http-addr", "127.0.0.1:0"}, {"--drain-delay", "0s"}} {
		if !has(args, d[0]) {
			full = append(full, d[0], d[1])
		}
	}
	return append(full, args...)
}

func start(bin string, env, args []string) (*Process, error) {
	cmd := exec.Command(bin, append([]string{"serve"}, ServeArgs(args...)...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RATELIMITD_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.SysProcAttr = sysProcAttr()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	p := &Process{cmd: cmd, logs: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout = p.logs
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	ready := make(chan [2]string, 1)
	go func() {
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
		p.err = cmd.Wait()
		close(p.done)
	}()
	select {
	case a := <-ready:
		p.GRPCAddr, p.HTTPAddr = a[0], a[1]
		return p, nil
	case <-p.done:
		return p, fmt.Errorf("ratelimitd exited before serving (%v); logs:\n%s", p.err, p.Logs())
	case <-time.After(StartTimeout):
		return p, fmt.Errorf("ratelimitd did not serve within %s; logs:\n%s", StartTimeout, p.Logs())
	}
}

// Logs returns everything the process wrote so far.
func (p *Process) Logs() string { return p.logs.String() }

// Signal sends sig to the process.
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Wait waits up to timeout for the process to exit and returns its exit
// code (-1 and an error if it did not exit in time or was killed).
func (p *Process) Wait(timeout time.Duration) (int, error) {
	select {
	case <-p.done:
	case <-time.After(timeout):
		return -1, fmt.Errorf("ratelimitd still running after %s", timeout)
	}
	var ee *exec.ExitError
	switch {
	case p.err == nil:
		return 0, nil
	case errors.As(p.err, &ee) && ee.ExitCode() >= 0:
		return ee.ExitCode(), nil
	}
	return -1, p.err
}

// Stop sends SIGTERM and waits (up to 15 s) for the exit code.
func (p *Process) Stop() (int, error) {
	if err := p.Signal(syscall.SIGTERM); err != nil {
		return -1, err
	}
	return p.Wait(15 * time.Second)
}

// kill kills the process (if it still runs) and reaps it.
func (p *Process) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Conn returns a gRPC client connection to the process, closed on cleanup.
func (p *Process) Conn(t testing.TB) *grpc.ClientConn { return dial(t, p.GRPCAddr) }

// URL returns the process's HTTP URL of path ("/readyz").
func (p *Process) URL(path string) string { return "http://" + p.HTTPAddr + path }

// dial returns a plaintext gRPC client connection to addr, closed on
// cleanup.
func dial(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("ratelimitdtest: dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
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
