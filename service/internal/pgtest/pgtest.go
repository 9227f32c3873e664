//go:build unix

// Package pgtest starts real PostgreSQL servers for Go tests. It does not
// mock anything: Start runs initdb into a t.TempDir and then postgres on a
// free 127.0.0.1 port (listen_addresses=127.0.0.1, its unix socket in the
// same temporary directory), creates a database and hands back its DSN. The
// server is stopped and its directory removed when the test ends
// (t.Cleanup); Kill and Restart let a test kill the database abruptly and
// bring it back on the same port with the same data, as the service's
// "killed-and-restarted database" tests need.
//
// A test binary with many PostgreSQL tests shares one server instead:
// StartShared in TestMain (the server starts on first use), NewDatabase
// in each test (a fresh database, dropped when the test ends), Close after
// m.Run.
//
// initdb and postgres refuse to run as root. When the test runs as root the
// server runs as the unprivileged system user sluicepg (created by
// scripts/ensure-postgres.sh, which `make deps` runs), with its directories
// chowned to that user; otherwise it runs as the current user.
//
// The server is tuned for tests: fsync and full_page_writes are off, which
// loses data only if the machine crashes. synchronous_commit stays on, so a
// committed transaction has reached the operating system and survives Kill. It runs in its own process group, and on
// Linux with PR_SET_PDEATHSIG=SIGKILL so it dies with the test binary if that
// exits without running its cleanups (its backends then exit on their own
// when they see the postmaster gone).
//
// Environment:
//
//   - PG_BINDIR: the directory holding initdb and postgres (default: the
//     newest /usr/lib/postgresql/*/bin, then PATH).
//   - SLUICE_REQUIRE_POSTGRES=1 (set by `make test`): a server that cannot
//     start fails the test (t.Fatalf). Without it such tests are skipped with
//     a message naming PostgreSQL, so `go test ./...` works on machines
//     without PostgreSQL.
//
// Start, Restart and the other helpers that take a testing.TB may call
// t.Fatalf or t.Skipf and must be called from the test's own goroutine; Kill
// may be called from any goroutine.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// RequireEnv is the environment variable that turns "PostgreSQL unavailable"
// from a skip into a test failure when set to "1".
const RequireEnv = "SLUICE_REQUIRE_POSTGRES"

// BinDirEnv is the environment variable that overrides the directory of the
// initdb and postgres binaries.
const BinDirEnv = "PG_BINDIR"

// RunAsUser is the unprivileged user the server runs as when the test runs
// as root.
const RunAsUser = "sluicepg"

// Database is the name of the database Start creates; User is the superuser
// the DSN connects as (trust authentication, loopback only).
const (
	Database = "sluice"
	User     = "postgres"
)

// startTimeout bounds how long a server may take to accept connections.
const startTimeout = 30 * time.Second

// Required reports whether PostgreSQL tests must run, that is whether
// SLUICE_REQUIRE_POSTGRES=1.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// unavailable skips the test, or fails it when PostgreSQL is required.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if Required() {
		t.Fatalf("pgtest: %s (%s=1, so PostgreSQL tests must run)", msg, RequireEnv)
	}
	t.Skipf("pgtest: skipping PostgreSQL test: %s (set %s=1 to make this a failure)", msg, RequireEnv)
}

// Server is one running (or killed) PostgreSQL server started by Start.
type Server struct {
	bindir  string
	dir     string // the test's temporary directory
	dataDir string
	sockDir string
	logPath string
	port    int
	cred    *syscall.Credential // nil when not running as root

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been reaped
}

// Start initialises a cluster in a t.TempDir, starts postgres on a free
// loopback port, waits until it accepts connections and creates the
// database Database. The server is stopped (and its directory removed) when
// the test ends. A server that cannot start skips the test, or fails it
// when SLUICE_REQUIRE_POSTGRES=1.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := launchIn(t.TempDir(), func(f func()) { t.Cleanup(f) })
	if err != nil {
		unavailable(t, "%v", err)
		return nil
	}
	return s
}

// Launch starts a server as Start does, for a program rather than a test
// (the fleet demo): initdb into dir, created if missing (when running as
// root its parent is opened to RunAsUser for traversal, so give it a
// directory of your own, never the system's temporary directory itself),
// postgres on a free loopback port, the database
// Database created. The caller stops it with Stop and removes dir.
func Launch(dir string) (*Server, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the server's directory: %w", err)
	}
	var stops []func()
	s, err := launchIn(dir, func(f func()) { stops = append(stops, f) })
	if err != nil {
		for _, f := range stops {
			f()
		}
		return nil, err
	}
	return s, nil
}

// Stop shuts a server started by Launch down (a fast shutdown, SIGKILL
// after five seconds) and waits until it has exited; its directory is
// left to the caller. A server started by Start is stopped by the test's
// cleanup and needs no Stop.
func (s *Server) Stop() { s.stop() }

// launchIn initialises a cluster in dir, starts postgres on a free
// loopback port and creates the database Database. cleanup registers the
// server's stop as soon as a process may exist.
func launchIn(dir string, cleanup func(func())) (*Server, error) {
	bindir, err := findBinDir()
	if err != nil {
		return nil, err
	}
	s := &Server{bindir: bindir, dir: dir}
	s.dataDir = filepath.Join(s.dir, "data")
	s.sockDir = filepath.Join(s.dir, "sock")
	s.logPath = filepath.Join(s.dir, "postgres.log")
	if err := s.prepare(); err != nil {
		return nil, err
	}
	cleanup(s.stop)
	if err := s.initdb(); err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, fmt.Errorf("choosing a port: %w", err)
		}
		s.port = port
		if lastErr = s.launch(); lastErr == nil {
			break
		}
	}
	if lastErr != nil {
		return nil, lastErr
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.dsn("postgres"))
	if err != nil {
		return nil, fmt.Errorf("connecting to the new server: %w", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+Database); err != nil {
		return nil, fmt.Errorf("creating database %s: %w", Database, err)
	}
	return s, nil
}

// DSN returns the connection string of the database Database, for
// pgx.Connect or pgxpool.New. It stays valid across Kill and Restart.
func (s *Server) DSN() string { return s.dsn(Database) }

// Port returns the loopback TCP port the server listens on.
func (s *Server) Port() int { return s.port }

// Pid returns the postmaster's process id, or 0 when it was never started.
// After Kill it still names the dead process.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Dir returns the server's temporary directory (data, socket and log).
func (s *Server) Dir() string { return s.dir }

func (s *Server) dsn(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable&connect_timeout=5", User, s.port, db)
}

// Kill sends SIGKILL to the postmaster and all its backends, as a crash
// would, and waits until they have exited, so an open connection is broken
// when Kill returns. It may be called from any goroutine; killing a server that
// is not running does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	killTree(cmd.Process.Pid)
	<-done
	removeSharedMemory(s.dataDir)
}

// Restart starts the server again, after Kill, on the same port with the
// same data directory, and waits until it accepts connections (running
// crash recovery if it was killed). It fails the test if the server does
// not come back.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Kill()
	if err := s.launch(); err != nil {
		t.Fatalf("pgtest: restarting postgres on port %d: %v", s.port, err)
	}
}

// Running reports whether the server process is alive.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// prepare creates the socket directory and, when running as root, makes
// the temporary directory usable by RunAsUser.
func (s *Server) prepare() error {
	if err := os.Mkdir(s.sockDir, 0o700); err != nil {
		return fmt.Errorf("creating socket directory: %w", err)
	}
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup(RunAsUser)
	if err != nil {
		return fmt.Errorf("running as root, and initdb refuses root: the user %s is missing (run scripts/ensure-postgres.sh or `make deps`): %w", RunAsUser, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return fmt.Errorf("uid of %s: %w", RunAsUser, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return fmt.Errorf("gid of %s: %w", RunAsUser, err)
	}
	s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}
	// t.TempDir's parent is created 0700; the server's user must traverse
	// it (not list it) to reach its own directories.
	for _, d := range []string{filepath.Dir(s.dir), s.dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			return fmt.Errorf("opening %s to %s: %w", d, RunAsUser, err)
		}
	}
	if err := os.Chown(s.sockDir, int(uid), int(gid)); err != nil {
		return fmt.Errorf("chowning socket directory to %s: %w", RunAsUser, err)
	}
	// initdb creates the data directory itself; give it a parent it owns.
	if err := os.Mkdir(s.dataDir, 0o700); err != nil {
		return fmt.Errorf("creating data directory: %w", err)
	}
	if err := os.Chown(s.dataDir, int(uid), int(gid)); err != nil {
		return fmt.Errorf("chowning data directory to %s: %w", RunAsUser, err)
	}
	return nil
}

// command builds a command that runs as RunAsUser when the test is root.
func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bindir, name), args...)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "LANG=C", "PGTZ=UTC")
	cmd.SysProcAttr = sysProcAttr()
	cmd.SysProcAttr.Credential = s.cred
	return cmd
}

// initdb creates the cluster.
func (s *Server) initdb() error {
	cmd := s.command("initdb", "-D", s.dataDir, "-U", User, "-A", "trust",
		"-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("initdb: %w: %s", err, out)
	}
	return nil
}

// launch starts postgres on s.port and waits until it accepts connections.
func (s *Server) launch() error {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("opening the server log: %w", err)
	}
	defer func() { _ = logf.Close() }()
	cmd := s.command("postgres", "-D", s.dataDir,
		"-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories="+s.sockDir,
		"-c", "fsync=off", "-c", "full_page_writes=off",
		"-c", "max_connections=50", "-c", "shared_buffers=16MB",
		"-c", "logging_collector=off", "-c", "log_min_messages=warning")
	cmd.Stdout = logf
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting postgres: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	if err := s.waitReady(done); err != nil {
		s.Kill()
		return fmt.Errorf("%w; log %s:\n%s", err, s.logPath, tail(s.logPath))
	}
	return nil
}

// waitReady polls until the server accepts a connection and answers a
// query, the process exits, or startTimeout passes.
func (s *Server) waitReady(done <-chan struct{}) error {
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, s.dsn("postgres"))
		if err == nil {
			// Another test's server may have won the race for the port:
			// only our own data directory counts as ready.
			var dataDir string
			err = conn.QueryRow(ctx, "SELECT current_setting('data_directory')").Scan(&dataDir)
			_ = conn.Close(ctx)
			if err == nil && dataDir != s.dataDir {
				cancel()
				return fmt.Errorf("port %d is served by another postgres (data directory %s)", s.port, dataDir)
			}
		}
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			return errors.New("postgres exited before accepting connections")
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres did not accept connections within %v: %w", startTimeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop shuts the server down: a fast shutdown (SIGINT), then SIGKILL to the
// process group if it has not exited within five seconds.
func (s *Server) stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	killTree(cmd.Process.Pid)
	<-done
	removeSharedMemory(s.dataDir)
}

// findBinDir returns the directory holding initdb and postgres.
func findBinDir() (string, error) {
	if d := os.Getenv(BinDirEnv); d != "" {
		if err := hasBinaries(d); err != nil {
			return "", fmt.Errorf("%s=%s: %w", BinDirEnv, d, err)
		}
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if hasBinaries(d) == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("postgres"); err == nil {
		d := filepath.Dir(p)
		if hasBinaries(d) == nil {
			return d, nil
		}
	}
	return "", errors.New("no initdb and postgres binaries under /usr/lib/postgresql/*/bin or in PATH (run scripts/ensure-postgres.sh or `make deps`)")
}

// version is the major version in /usr/lib/postgresql/<version>/bin.
func version(dir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return v
}

func hasBinaries(dir string) error {
	for _, name := range []string{"initdb", "postgres"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tail returns the last few kilobytes of a log file.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(b)
}
