package adminauth_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/service/internal/pgtest"
)

// pg is one PostgreSQL server for this test binary; each test on it gets a
// fresh database.
var pg *pgtest.Shared

func TestMain(m *testing.M) {
	pg = pgtest.StartShared()
	code := m.Run()
	pg.Close()
	os.Exit(code)
}

// each runs f as a subtest on a real SQLite file and on a real
// PostgreSQL database, with a fresh database's DSN, the two at once (one
// waits on the PostgreSQL server while the other runs).
func each(t *testing.T, f func(t *testing.T, dsn string)) {
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); f(t, "file:"+filepath.Join(t.TempDir(), "rules.db")) })
	t.Run("postgres", func(t *testing.T) { t.Parallel(); f(t, pg.NewDatabase(t)) })
}
