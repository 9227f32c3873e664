//go:build unix

package pgtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Shared is one PostgreSQL server for a whole test binary, started from
// TestMain with StartShared and stopped with Close; each test takes a fresh
// database of its own with NewDatabase, which is much cheaper than a server
// per test (initdb takes about a second). Tests that Kill a server start
// their own with Start instead.
type Shared struct {
	once sync.Once
	dir  string
	srv  *Server
	err  error
	stop []func()
	n    atomic.Int64
}

// StartShared returns a Shared whose server starts on first use (so a test
// binary whose selected tests never ask for PostgreSQL starts none). Call
// it from TestMain and Close it after m.Run.
func StartShared() *Shared { return &Shared{} }

func (s *Shared) start() {
	s.once.Do(func() {
		dir, err := os.MkdirTemp("", "pgtest-shared-")
		if err != nil {
			s.err = err
			return
		}
		s.dir = dir
		// launchIn opens the parent of its directory to the server's user
		// when running as root: give it one of ours, never the temporary
		// directory itself.
		pgdir := filepath.Join(dir, "pg")
		if s.err = os.Mkdir(pgdir, 0o700); s.err != nil {
			return
		}
		s.srv, s.err = launchIn(pgdir, func(f func()) { s.stop = append(s.stop, f) })
	})
}

// NewDatabase creates an empty database on the shared server and returns
// its DSN; it is dropped when the test ends. A server that cannot start
// skips the test, or fails it under SLUICE_REQUIRE_POSTGRES=1.
func (s *Shared) NewDatabase(t testing.TB) string {
	t.Helper()
	s.start()
	if s.err != nil {
		unavailable(t, "%v", s.err)
		return ""
	}
	name := fmt.Sprintf("t%d_%d", os.Getpid(), s.n.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.srv.dsn("postgres"))
	if err != nil {
		t.Fatalf("pgtest: connecting to the shared server: %v", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: creating database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, s.srv.dsn("postgres"))
		if err != nil {
			return
		}
		defer func() { _ = conn.Close(context.Background()) }()
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	return s.srv.dsn(name)
}

// Close stops the shared server (if it started) and removes its directory.
func (s *Shared) Close() {
	for i := len(s.stop) - 1; i >= 0; i-- {
		s.stop[i]()
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}
