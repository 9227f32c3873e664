package rulesdb

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/service/internal/pgtest"
)

// pg is one PostgreSQL server for this test binary; every test that runs
// on PostgreSQL gets a fresh database of its own on it.
var pg *pgtest.Shared

func TestMain(m *testing.M) {
	pg = pgtest.StartShared()
	code := m.Run()
	pg.Close()
	os.Exit(code)
}

// backend is a kind of database the store runs on: dsn returns a fresh,
// empty database of that kind for t.
type backend struct {
	name string
	dsn  func(t *testing.T) string
}

var backends = []backend{
	{"sqlite", func(t *testing.T) string { return "file:" + filepath.Join(t.TempDir(), "rules.db") }},
	{"postgres", func(t *testing.T) string { return pg.NewDatabase(t) }},
}

// each runs f as a subtest on every backend, with a fresh database's DSN,
// the backends at once (one waits on the PostgreSQL server while the
// other runs).
func each(t *testing.T, f func(t *testing.T, dsn string)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { t.Parallel(); f(t, b.dsn(t)) })
	}
}

// sqliteOnly returns the path of a fresh SQLite database (for the tests of
// SQLite's own behaviour: files, pragmas, the busy timeout).
func sqliteOnly(t *testing.T) string { return filepath.Join(t.TempDir(), "rules.db") }
