package propbench

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
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/service/rulesdb"
)

// RunAsUser is the unprivileged user PostgreSQL runs as when the benchmark
// runs as root (initdb and postgres refuse root): the user
// scripts/ensure-postgres.sh creates for the service's tests.
const RunAsUser = "sluicepg"

// Postgres is a real PostgreSQL server the benchmark started: initdb into a
// temporary directory, postgres on a free loopback port (no unix socket
// outside that directory), tuned as the service's tests tune theirs (fsync
// off, which loses data only if the machine crashes). Close stops it and
// removes the directory.
type Postgres struct {
	dir, data string
	port      int
	cmd       *exec.Cmd
	done      chan struct{}
	log       string
}

// ErrNoPostgres says no PostgreSQL binaries were found.
var ErrNoPostgres = errors.New("no initdb and postgres under /usr/lib/postgresql/*/bin or $PG_BINDIR (make deps installs them)")

// StartPostgres starts a PostgreSQL server and waits until its database
// accepts connections and carries rulesdb's schema (rulesdb.Open).
func StartPostgres(ctx context.Context) (*Postgres, error) {
	bin, err := pgBinDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sluice-bench-pg-")
	if err != nil {
		return nil, err
	}
	p := &Postgres{dir: dir, data: filepath.Join(dir, "data"), log: filepath.Join(dir, "postgres.log")}
	sock := filepath.Join(dir, "sock")
	cred, err := p.makeDirs(sock)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	command := func(name string, args ...string) *exec.Cmd {
		c := exec.Command(filepath.Join(bin, name), args...)
		c.Dir = dir
		c.Env = append(os.Environ(), "LC_ALL=C", "LANG=C", "PGTZ=UTC")
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
		return c
	}
	if out, err := command("initdb", "-D", p.data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions").CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %w: %s", err, out)
	}
	if err := p.start(command, sock); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := p.waitReady(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// makeDirs makes the data directory and the socket directory sock: as
// root, owned by RunAsUser, whose credential it returns (postgres refuses
// to run as root); else only sock, the credential nil.
func (p *Postgres) makeDirs(sock string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, os.Mkdir(sock, 0o700)
	}
	u, err := user.Lookup(RunAsUser)
	if err != nil {
		return nil, fmt.Errorf("postgres: running as root needs the user %s (scripts/ensure-postgres.sh): %w", RunAsUser, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	for _, d := range []string{p.data, sock} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, err
		}
		if err := os.Chown(d, uid, gid); err != nil {
			return nil, err
		}
	}
	if err := os.Chmod(p.dir, 0o711); err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// start starts postgres (made by command) on a free port of 127.0.0.1,
// its socket in sock and its output in p.log.
func (p *Postgres) start(command func(name string, args ...string) *exec.Cmd, sock string) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	p.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	p.cmd = command("postgres", "-D", p.data, "-p", strconv.Itoa(p.port), "-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories="+sock, "-c", "fsync=off", "-c", "full_page_writes=off",
		"-c", "max_connections=50", "-c", "shared_buffers=16MB", "-c", "log_min_messages=warning")
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	p.done = make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	return nil
}

// waitReady waits, 30 s at most, until the server p started is ready and
// its database opens with rulesdb's schema; if it is not, p is closed.
func (p *Postgres) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		// Our postmaster must say it is ready, hence that it holds the
		// port: another server may have taken the port between our
		// choosing it and postgres binding it, and rulesdb.Open would
		// then succeed against that one.
		err := p.ownReady()
		if err == nil {
			octx, cancel := context.WithTimeout(ctx, 2*time.Second)
			var d *rulesdb.DB
			d, err = rulesdb.Open(octx, p.DSN())
			cancel()
			if err == nil {
				_ = d.Close()
				return nil
			}
		}
		select {
		case <-p.done:
			p.Close()
			return fmt.Errorf("postgres exited before accepting connections: %s", p.tail())
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.Close()
			return fmt.Errorf("postgres not ready within 30 s: %w; %s", err, p.tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ownReady reports (nil) whether the postmaster we started says, in its
// data directory's postmaster.pid, that it is ready to accept connections
// (line 1 its pid, line 8 its status), which it is only once it has bound
// its port.
func (p *Postgres) ownReady() error {
	b, err := os.ReadFile(filepath.Join(p.data, "postmaster.pid"))
	if err != nil {
		return err
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 8 || strings.TrimSpace(lines[0]) != strconv.Itoa(p.cmd.Process.Pid) || strings.TrimSpace(lines[7]) != "ready" {
		return errors.New("postmaster.pid: not ready yet")
	}
	return nil
}

// DSN is the connection string of the server's database "postgres".
func (p *Postgres) DSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=5", p.port)
}

// Close stops the server (a fast shutdown; SIGKILL to its process group
// after 5 s) and removes its directory.
func (p *Postgres) Close() {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	}
	os.RemoveAll(p.dir)
}

func (p *Postgres) tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// pgBinDir is $PG_BINDIR or the newest /usr/lib/postgresql/*/bin holding
// initdb and postgres.
func pgBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		a, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		b, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return a > b
	})
	if d := os.Getenv("PG_BINDIR"); d != "" {
		dirs = []string{d}
	}
	for _, d := range dirs {
		_, e1 := os.Stat(filepath.Join(d, "initdb"))
		_, e2 := os.Stat(filepath.Join(d, "postgres"))
		if e1 == nil && e2 == nil {
			return d, nil
		}
	}
	return "", ErrNoPostgres
}
