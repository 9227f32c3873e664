package redistest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// Ports are drawn from [portLo, portHi); cluster nodes also need
	// port+busOffset (the cluster bus). Both ranges stay below the Linux
	// ephemeral range (32768+), so outgoing connections never hold them.
	portLo    = 12000
	portHi    = 22000
	busOffset = 10000

	startTimeout   = 5 * time.Second  // process start until it answers
	stopTimeout    = 5 * time.Second  // graceful stop before escalating
	killTimeout    = 10 * time.Second // SIGKILL until reaped
	pollInterval   = 10 * time.Millisecond
	probeTimeout   = 500 * time.Millisecond
	maxPortRetries = 8
	logTailLines   = 25
)

var errPortInUse = errors.New("port already in use")

type serverKind int

const (
	kindPlain serverKind = iota
	kindCluster
	kindSentinel
)

// Server is one redis-server (or redis-sentinel) process owned by a test.
// It is killed and reaped by a t.Cleanup registered when it is created.
type Server struct {
	// Addr is "127.0.0.1:<Port>". It never changes, also across Restart.
	Addr string
	// Port is the TCP port the server listens on (127.0.0.1 only).
	Port int
	// Dir is the server's private temporary directory: config file
	// (redis.conf or sentinel.conf), redis.log, stdio.log, nodes.conf.
	Dir string

	errorf    func(format string, args ...any) // the owning test's Errorf
	bin       string
	major     int
	kind      serverKind
	extra     []string // conf lines appended after the harness's own
	confPath  string
	logPath   string
	stdioPath string

	opMu sync.Mutex // serializes Kill/Stop/Restart/cleanup

	mu       sync.Mutex // guards the fields below
	p        *proc
	closed   bool
	logOff   int64 // log sizes when the current process was launched
	stdioOff int64
}

// proc is one launched process; done is closed once it has been reaped.
type proc struct {
	cmd  *exec.Cmd
	pid  int
	done chan struct{}
	err  error // Wait's result, valid after done is closed
}

// StartServer starts a standalone redis-server on a free 127.0.0.1 port and
// waits until it answers. Extra arguments use redis-server's command-line
// syntax and are appended to the generated redis.conf, for example
//
//	redistest.StartServer(t, "--maxmemory", "1mb", "--maxmemory-policy", "noeviction")
//
// port, bind, dir, logfile and daemonize are managed by the harness and
// cannot be set. The server is killed on test cleanup. If redis-server is
// missing or cannot start, the test is skipped (or fails, see Required).
func StartServer(t testing.TB, args ...string) *Server {
	t.Helper()
	bin, major := binary(t)
	extra, err := argsToConf(args)
	if err != nil {
		t.Fatalf("%v", err)
	}
	s, err := newServer(t, bin, major, kindPlain, extra)
	if err == nil {
		err = s.awaitStart(time.Now().Add(startTimeout), true)
	}
	if err != nil {
		startFailed(t, err)
	}
	return s
}

// Launch starts a standalone redis-server as StartServer does, for a
// program rather than a test (the fleet demo): its files in dir (created
// if missing), on a free 127.0.0.1 port, ready when it returns. The caller
// ends it with Close and removes dir. A missing redis-server is an error
// naming it.
func Launch(dir string, args ...string) (*Server, error) {
	bin, err := findBinary()
	if err != nil {
		return nil, err
	}
	major, err := serverMajor(bin)
	if err != nil {
		return nil, err
	}
	extra, err := argsToConf(args)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	var cleanups []func()
	report := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	s, err := newServerIn(dir, report, func(f func()) { cleanups = append(cleanups, f) }, bin, major, kindPlain, extra)
	if err == nil {
		err = s.awaitStart(time.Now().Add(startTimeout), true)
	}
	if err != nil {
		for _, f := range cleanups {
			f()
		}
		return nil, err
	}
	return s, nil
}

// Close kills a server started by Launch for good (SIGKILL; Stop first for
// a graceful shutdown) and releases its port. A server started by a test
// is closed by the test's cleanup.
func (s *Server) Close() { s.cleanup() }

// newServer creates the server's directory and config, registers its
// cleanup and launches it without waiting for it to be ready.
func newServer(t testing.TB, bin string, major int, kind serverKind, extra []string) (*Server, error) {
	t.Helper()
	return newServerIn(t.TempDir(), t.Errorf, t.Cleanup, bin, major, kind, extra)
}

// newServerIn is newServer in dir, reporting stop failures with errorf and
// registering its cleanup with cleanup.
func newServerIn(dir string, errorf func(string, ...any), cleanup func(func()), bin string, major int, kind serverKind, extra []string) (*Server, error) {
	s := &Server{errorf: errorf, bin: bin, major: major, kind: kind, extra: extra, Dir: dir}
	conf := "redis.conf"
	if kind == kindSentinel {
		conf = "sentinel.conf"
	}
	s.confPath = filepath.Join(s.Dir, conf)
	s.logPath = filepath.Join(s.Dir, "redis.log")
	s.stdioPath = filepath.Join(s.Dir, "stdio.log")
	// Registered before anything is started: it runs even if the test fails
	// or panics, and before t.TempDir's own removal (cleanups are LIFO).
	cleanup(s.cleanup)
	if err := s.assignPort(); err != nil {
		return nil, err
	}
	if err := s.launch(); err != nil {
		return nil, err
	}
	return s, nil
}

// assignPort (re)picks the port and rewrites the config. Only used before
// the server first came up.
func (s *Server) assignPort() error {
	if s.Port != 0 {
		releasePort(s.Port)
		s.Port = 0
	}
	port, err := reservePort(s.kind == kindCluster)
	if err != nil {
		return err
	}
	s.Port = port
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	return os.WriteFile(s.confPath, []byte(s.renderConf()), 0o644)
}

func (s *Server) renderConf() string {
	lines := []string{
		"# generated by sluice internal/redistest",
		"bind 127.0.0.1",
		"port " + strconv.Itoa(s.Port),
		"daemonize no",
		"dir " + quoteConf(s.Dir),
		"logfile " + quoteConf(s.logPath),
	}
	if s.kind != kindSentinel {
		lines = append(lines,
			`save ""`,
			"appendonly no",
			"repl-diskless-sync-delay 0",
		)
		if s.major >= 7 {
			lines = append(lines,
				"enable-debug-command local", // DEBUG SLEEP etc. for fault tests
				"shutdown-timeout 1",         // bound SIGTERM's wait for replicas
			)
		}
	}
	if s.kind == kindCluster {
		lines = append(lines,
			"cluster-enabled yes",
			"cluster-config-file nodes.conf",
			"cluster-node-timeout 3000",
			// A node learns its own IP only from peers' packets; announce
			// it so that even a 1-node cluster reports 127.0.0.1.
			"cluster-announce-ip 127.0.0.1",
		)
	}
	lines = append(lines, s.extra...)
	return strings.Join(lines, "\n") + "\n"
}

// launch starts the process (not waiting for readiness).
func (s *Server) launch() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("server already cleaned up")
	}
	if s.p != nil {
		return fmt.Errorf("%s is already running (pid %d)", s.Addr, s.p.pid)
	}
	s.logOff, s.stdioOff = fileSize(s.logPath), fileSize(s.stdioPath)
	out, err := os.OpenFile(s.stdioPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close() // the child has its own copy
	args := []string{s.confPath}
	if s.kind == kindSentinel {
		args = append(args, "--sentinel")
	}
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.Dir
	cmd.Stdout, cmd.Stderr = out, out // *os.File: no copying goroutines
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	p := &proc{cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{})}
	trackLive(p, true)
	go func() { // ends when the process exits; cleanup guarantees that
		p.err = cmd.Wait()
		trackLive(p, false)
		close(p.done)
	}()
	s.p = p
	return nil
}

// awaitStart waits until the launched process answers; if it lost a race
// for its port it is relaunched, on a new port when repick is set (initial
// start) or on the same port after a short pause (Restart).
func (s *Server) awaitStart(deadline time.Time, repick bool) error {
	for attempt := 1; ; attempt++ {
		err := s.waitReady(deadline)
		if err == nil || !errors.Is(err, errPortInUse) || attempt >= maxPortRetries || time.Now().After(deadline) {
			return err
		}
		if repick {
			if err := s.assignPort(); err != nil {
				return err
			}
		} else {
			time.Sleep(100 * time.Millisecond)
		}
		if err := s.launch(); err != nil {
			return err
		}
	}
}

// waitReady polls INFO server until the process answers on s.Addr and
// reports its own pid (so that a foreign server that grabbed the port is
// never mistaken for ours), the process exits, or the deadline passes.
func (s *Server) waitReady(deadline time.Time) error {
	s.mu.Lock()
	p := s.p
	s.mu.Unlock()
	if p == nil {
		return fmt.Errorf("%s is not running", s.Addr)
	}
	want := strconv.Itoa(p.pid)
	// Cancel an in-flight probe as soon as the process exits: a foreign
	// listener holding the port may accept connections and never answer.
	exited, cancelExited := context.WithDeadline(context.Background(), deadline)
	defer cancelExited()
	go func() {
		select {
		case <-p.done:
			cancelExited()
		case <-exited.Done():
		}
	}()
	for {
		select {
		case <-p.done:
			s.mu.Lock()
			if s.p == p {
				s.p = nil
			}
			s.mu.Unlock()
			return s.exitError(p)
		default:
		}
		ctx, cancel := context.WithTimeout(exited, probeTimeout)
		m, err := info(ctx, s.Addr, "server")
		cancel()
		if err == nil {
			if m["process_id"] == want {
				return nil
			}
			err = fmt.Errorf("port answered by another process (pid %s)", m["process_id"])
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s (pid %d) did not answer in time: %v%s", s.describe(), p.pid, err, s.tail())
		}
		time.Sleep(pollInterval)
	}
}

func (s *Server) describe() string {
	kind := "redis-server"
	switch s.kind {
	case kindCluster:
		kind = "redis cluster node"
	case kindSentinel:
		kind = "redis sentinel"
	}
	return kind + " " + s.Addr
}

// exitError explains an unexpected exit during startup.
func (s *Server) exitError(p *proc) error {
	fresh := readFrom(s.logPath, s.logOff) + readFrom(s.stdioPath, s.stdioOff)
	msg := fmt.Sprintf("%s (pid %d) exited during startup: %v%s", s.describe(), p.pid, p.err, s.tail())
	switch {
	case strings.Contains(fresh, "FATAL CONFIG FILE ERROR"):
		return fmt.Errorf("%w: %s", errConfig, msg)
	case strings.Contains(fresh, "Address already in use"), strings.Contains(fresh, "Failed listening on port"):
		return fmt.Errorf("%w: %s", errPortInUse, msg)
	}
	return errors.New(msg)
}

// Pid returns the pid of the running process, or 0 if it is not running.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		return 0
	}
	select {
	case <-s.p.done:
		return 0
	default:
		return s.p.pid
	}
}

// take detaches the current process from s.
func (s *Server) take() *proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.p
	s.p = nil
	return p
}

// Kill sends SIGKILL to the server's process group and waits until it has
// been reaped. It is a no-op if the server is not running.
func (s *Server) Kill() {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if p := s.take(); p != nil {
		if err := p.kill(); err != nil {
			s.errorf("redistest: kill %s: %v", s.Addr, err)
		}
	}
}

// Stop shuts the server down gracefully (SIGTERM: clients see their
// connections closed), escalating to SIGKILL after 5 s, and waits until it
// has been reaped. It is a no-op if the server is not running.
func (s *Server) Stop() {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.stopLocked()
}

func (s *Server) stopLocked() {
	p := s.take()
	if p == nil {
		return
	}
	if terminate(p.cmd.Process) == nil {
		select {
		case <-p.done:
			killGroup(p.pid) // sweep forked children, if any
			return
		case <-time.After(stopTimeout):
		}
	}
	if err := p.kill(); err != nil {
		s.errorf("redistest: stop %s: %v", s.Addr, err)
	}
}

// Restart starts the server again on the same port, directory and config
// file, after stopping it gracefully if it is still running, and waits until
// it answers. The dataset is empty after a restart (no persistence), but
// config written back by CONFIG REWRITE (which Sentinel uses) and a cluster
// node's nodes.conf (identity, slots) survive. It fails the test if the
// server cannot come back.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.stopLocked()
	err := s.launch()
	if err == nil {
		err = s.awaitStart(time.Now().Add(startTimeout), false)
	}
	if err != nil {
		t.Fatalf("redistest: restart %s: %v", s.Addr, err)
	}
}

// appendConf appends a line to the config file used by the next (re)start.
func (s *Server) appendConf(line string) error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	f, err := os.OpenFile(s.confPath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString("\n" + line + "\n"); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// cleanup kills the process for good and releases the port.
func (s *Server) cleanup() {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	if p := s.take(); p != nil {
		if err := p.kill(); err != nil {
			s.errorf("redistest: cleanup %s: %v", s.Addr, err)
		}
	}
	if s.Port != 0 {
		releasePort(s.Port)
	}
}

// kill SIGKILLs the process and its group and waits until it is reaped.
func (p *proc) kill() error {
	_ = p.cmd.Process.Kill() // pidfd based: safe even if already reaped
	killGroup(p.pid)
	select {
	case <-p.done:
		return nil
	case <-time.After(killTimeout):
		return fmt.Errorf("pid %d still running %v after SIGKILL", p.pid, killTimeout)
	}
}

// Client returns a go-redis client for the server, closed on test cleanup.
// Options may adjust the redis.Options (timeouts, retries, protocol...).
func (s *Server) Client(t testing.TB, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: s.Addr}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// LogTail returns up to the last n lines of the server's log (redis.log,
// plus stdout/stderr if anything was written there), for diagnostics.
func (s *Server) LogTail(n int) string {
	out := lastLines(s.logPath, n)
	if extra := lastLines(s.stdioPath, n); extra != "" {
		out += "\n[stdout/stderr]\n" + extra
	}
	return out
}

func (s *Server) tail() string {
	return fmt.Sprintf("\n--- %s: %s (last %d lines) ---\n%s", s.describe(), s.logPath, logTailLines, s.LogTail(logTailLines))
}

// ---- ports ----

var (
	portMu     sync.Mutex
	portsInUse = map[int]bool{} // handed out by this process and not yet released
)

// reservePort returns a random port in [portLo, portHi) that this process
// has not handed out and that can currently be bound on 127.0.0.1 (and so
// can port+busOffset when bus is set). Losing a race for it to another
// process later is detected and retried by awaitStart.
func reservePort(bus bool) (int, error) {
	portMu.Lock()
	defer portMu.Unlock()
	for range 1000 {
		p := portLo + rand.IntN(portHi-portLo)
		if portsInUse[p] || !portFree(p) || (bus && !portFree(p+busOffset)) {
			continue
		}
		portsInUse[p] = true
		return p, nil
	}
	return 0, fmt.Errorf("no free port found in 127.0.0.1:%d-%d", portLo, portHi-1)
}

func releasePort(p int) {
	portMu.Lock()
	delete(portsInUse, p)
	portMu.Unlock()
}

func portFree(p int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// ---- live process tracking (lets tests assert nothing leaked) ----

var (
	liveMu sync.Mutex
	live   = map[*proc]struct{}{}
)

func trackLive(p *proc, alive bool) {
	liveMu.Lock()
	defer liveMu.Unlock()
	if alive {
		live[p] = struct{}{}
	} else {
		delete(live, p)
	}
}

// livePids returns the pids of started processes that have not been reaped.
func livePids() []int {
	liveMu.Lock()
	defer liveMu.Unlock()
	pids := make([]int, 0, len(live))
	for p := range live {
		pids = append(pids, p.pid)
	}
	return pids
}

// ---- log helpers ----

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// readFrom returns the content of path from offset off (at most 64 KiB).
func readFrom(path string, off int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(io.NewSectionReader(f, off, 1<<62), 64<<10))
	return string(b)
}

// lastLines returns the last n lines of path (reading at most its last 32 KiB).
func lastLines(path string, n int) string {
	off := fileSize(path) - 32<<10
	if off < 0 {
		off = 0
	}
	lines := strings.Split(strings.TrimRight(readFrom(path, off), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}
