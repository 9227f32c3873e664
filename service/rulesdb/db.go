package rulesdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// DB is a rules database: open with Open, close with Close. It is safe for
// concurrent use.
type DB struct {
	db  *sql.DB
	now func() time.Time
	pg  bool // PostgreSQL placeholders ($1) instead of ?
}

// Open opens (creating it if needed) the SQLite database at dsn and brings
// its schema up to date. dsn is a file path or "file:PATH"; WAL journaling,
// a 5 s busy timeout, foreign keys and immediate (write-locking)
// transactions are set unless the DSN sets them. A schema newer than this
// build is refused with ErrSchemaTooNew.
func Open(ctx context.Context, dsn string) (*DB, error) {
	if strings.TrimSpace(dsn) == "" {
		return nil, errors.New("rulesdb: dsn: required")
	}
	db, err := sql.Open("sqlite", sqliteDSN(dsn))
	if err != nil {
		return nil, fmt.Errorf("rulesdb: dsn: %w", err)
	}
	d := &DB{db: db, now: time.Now}
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("rulesdb: open: %w", err)
	}
	if err := d.migrate(ctx); err != nil {
		_ = db.Close()
		return nil, err
	}
	return d, nil
}

// sqliteDSN adds the pragmas the store relies on to a path or file: DSN.
func sqliteDSN(dsn string) string {
	path, query, _ := strings.Cut(strings.TrimPrefix(dsn, "file:"), "?")
	v, err := url.ParseQuery(query)
	if err != nil {
		v = url.Values{}
	}
	have := strings.Join(v["_pragma"], ",")
	for _, p := range []string{"busy_timeout(5000)", "journal_mode(WAL)", "foreign_keys(1)"} {
		name, _, _ := strings.Cut(p, "(")
		if !strings.Contains(have, name) {
			v.Add("_pragma", p)
		}
	}
	if v.Get("_txlock") == "" {
		v.Set("_txlock", "immediate")
	}
	return "file:" + path + "?" + v.Encode()
}

// Close closes the database. Operations after Close return errors.
func (d *DB) Close() error { return d.db.Close() }

// Revision returns the database's revision: the number of writes made to
// it, bumped by each in its own transaction.
func (d *DB) Revision(ctx context.Context) (int64, error) {
	var rev int64
	if err := d.db.QueryRowContext(ctx, `SELECT value FROM revision WHERE id = 1`).Scan(&rev); err != nil {
		return 0, fmt.Errorf("rulesdb: revision: %w", err)
	}
	return rev, nil
}

// q rewrites ? placeholders as $1, $2, ... for PostgreSQL.
func (d *DB) q(query string) string {
	if !d.pg {
		return query
	}
	var b strings.Builder
	n := 0
	for _, c := range query {
		if c == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// bump increments the revision inside tx and returns the new value.
func (d *DB) bump(ctx context.Context, tx *sql.Tx) (int64, error) {
	if _, err := tx.ExecContext(ctx, `UPDATE revision SET value = value + 1 WHERE id = 1`); err != nil {
		return 0, fmt.Errorf("rulesdb: revision: %w", err)
	}
	var rev int64
	if err := tx.QueryRowContext(ctx, `SELECT value FROM revision WHERE id = 1`).Scan(&rev); err != nil {
		return 0, fmt.Errorf("rulesdb: revision: %w", err)
	}
	return rev, nil
}
