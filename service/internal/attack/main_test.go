package attack

import (
	"os"
	"testing"

	"github.com/sluicehq/sluice/service/internal/pgtest"
)

// pg is one PostgreSQL server for this test binary, started on first use;
// each test on it gets a fresh database (pg.NewDatabase).
var pg *pgtest.Shared

func TestMain(m *testing.M) {
	pg = pgtest.StartShared()
	code := m.Run()
	pg.Close()
	os.Exit(code)
}

// onDBs runs f on a fresh SQLite file and on a fresh PostgreSQL database.
// The two at once: one waits on the PostgreSQL server while the other runs.
func onDBs(t *testing.T, f func(t *testing.T, dsn string)) {
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); f(t, "file:"+t.TempDir()+"/rules.db") })
	t.Run("postgres", func(t *testing.T) { t.Parallel(); f(t, pg.NewDatabase(t)) })
}
