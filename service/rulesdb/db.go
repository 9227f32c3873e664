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

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib" // also registers the "pgx" database/sql driver
	"modernc.org/sqlite"             // registers the "sqlite" database/sql driver
	sqlite3 "modernc.org/sqlite/lib"
)

// DB is a rules database: open with Open, close with Close. It is safe for
// concurrent use.
type DB struct {
	db      *sql.DB
	now     func() time.Time
	pg      bool   // PostgreSQL: $1 placeholders, row locks, NOTIFY
	dsn     string // the PostgreSQL DSN, for the listener's own connection
	timeout time.Duration
}

// DefaultTimeout is the bound of each call of a DB on its database unless
// WithTimeout sets another.
const DefaultTimeout = 5 * time.Second

// Option configures a DB (Open).
type Option func(*options)

type options struct{ timeout time.Duration }

// WithTimeout bounds each call of the DB on its database (a query, a
// write's whole transaction, a load of the Source's): past d it fails
// with an error wrapping context.DeadlineExceeded, and a transaction cut
// short is rolled back, so a write is whole or absent. It holds whatever
// the caller's context (a context with an earlier deadline keeps it), so
// a database that stops answering (a network partition that drops
// packets without closing the connections) never holds a caller longer
// than d. d must be positive; the default is DefaultTimeout. Migrations
// at Open are bounded by Open's context only.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// bound returns ctx bounded by the DB's timeout.
func (d *DB) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d.timeout)
}

// Timeout returns the bound of each of the DB's calls (WithTimeout).
func (d *DB) Timeout() time.Duration { return d.timeout }

// Open opens the rules database at dsn and brings its schema up to date.
// A dsn starting with "postgres://" or "postgresql://" is a PostgreSQL
// database (pgx v5; migrations run under a transaction-scoped advisory
// lock, so instances starting together never migrate twice). Anything
// else is a SQLite file: a path or "file:PATH", created if needed, with WAL
// journaling, a 5 s busy timeout, foreign keys and immediate
// (write-locking) transactions unless the DSN sets them. A schema newer
// than this build is refused with ErrSchemaTooNew.
func Open(ctx context.Context, dsn string, opts ...Option) (*DB, error) {
	if strings.TrimSpace(dsn) == "" {
		return nil, errors.New("rulesdb: dsn: required")
	}
	o := options{timeout: DefaultTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	if o.timeout <= 0 {
		return nil, fmt.Errorf("rulesdb: timeout: must be positive, got %s", o.timeout)
	}
	d := &DB{now: time.Now, timeout: o.timeout}
	var err error
	if IsPostgres(dsn) {
		d.pg, d.dsn = true, dsn
		d.db, err = openPG(dsn, o.timeout)
		if err == nil {
			// Writes serialize on the revision row anyway; a bounded pool
			// keeps a fleet within the server's max_connections (each
			// instance also holds one listening connection).
			d.db.SetMaxOpenConns(maxOpenPG)
			d.db.SetConnMaxIdleTime(5 * time.Minute)
		}
	} else {
		d.db, err = sql.Open("sqlite", sqliteDSN(dsn))
	}
	if err != nil {
		return nil, fmt.Errorf("rulesdb: dsn: %w", err)
	}
	if err := d.prepare(ctx, dsn); err != nil {
		_ = d.db.Close()
		return nil, err
	}
	return d, nil
}

// prepare pings the database and brings its schema up to date. SQLite
// answers SQLITE_BUSY at once, without waiting out its busy timeout, in
// the few places where waiting could deadlock, one of them connections
// racing to create a new file and switch it to WAL; such an open is tried
// again, within the DB's timeout, as SQLite's documentation advises.
func (d *DB) prepare(ctx context.Context, dsn string) error {
	deadline := time.Now().Add(d.timeout)
	for {
		err := d.db.PingContext(ctx)
		if err != nil {
			err = fmt.Errorf("rulesdb: open %s: %w", Redact(dsn), err)
		} else {
			err = d.migrate(ctx)
		}
		if err == nil || d.pg || !sqliteBusy(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// sqliteBusy reports whether err is SQLite's SQLITE_BUSY or SQLITE_LOCKED.
func sqliteBusy(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	code := se.Code() & 0xff
	return code == sqlite3.SQLITE_BUSY || code == sqlite3.SQLITE_LOCKED
}

// idleInTx is PostgreSQL's setting that ends a session whose transaction
// has waited for its client longer than its value (milliseconds).
const idleInTx = "idle_in_transaction_session_timeout"

// openPG opens the pool of the PostgreSQL database dsn. Its sessions end
// a transaction left idle longer than timeout (unless dsn sets
// idle_in_transaction_session_timeout itself): no call of the DB keeps
// one open that long, so such a transaction was abandoned by a client cut
// off from the server (a partition), and its locks (the revision row's,
// which every write takes) are released instead of holding every other
// instance's writes until the server notices the connection is dead.
func openPG(dsn string, timeout time.Duration) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	if _, set := cfg.RuntimeParams[idleInTx]; !set {
		cfg.RuntimeParams[idleInTx] = strconv.FormatInt(max(timeout.Milliseconds(), 1), 10)
	}
	return stdlib.OpenDB(*cfg), nil
}

// IsPostgres reports whether dsn names a PostgreSQL database
// ("postgres://" or "postgresql://").
func IsPostgres(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// Redact returns dsn with any password replaced by "xxxxx", for logs and
// errors: "postgres://app:secret@db/rules" becomes
// "postgres://app:xxxxx@db/rules" (a password=... parameter too).
func Redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		if strings.Contains(dsn, "@") || strings.Contains(strings.ToLower(dsn), "password") {
			return "(unparsable DSN, redacted)"
		}
		return dsn
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	if q := u.Query(); q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.String()
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
	ctx, cancel := d.bound(ctx)
	defer cancel()
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

// maxOpenPG bounds a DB's pool of PostgreSQL connections.
const maxOpenPG = 8

// NotifyChannel is the PostgreSQL channel every write notifies, in its
// transaction, with the new revision as the payload.
const NotifyChannel = "sluice_rules"

// begin starts a write transaction. On PostgreSQL it first takes the
// revision row's lock (SELECT ... FOR UPDATE), so writes serialize from
// their first read: a write never decides on a row another write is
// changing (SQLite's immediate transactions do the same with the database
// lock).
func (d *DB) begin(ctx context.Context) (*sql.Tx, error) {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil || !d.pg {
		return tx, err
	}
	var rev int64
	if err := tx.QueryRowContext(ctx, `SELECT value FROM revision WHERE id = 1 FOR UPDATE`).Scan(&rev); err != nil {
		_ = tx.Rollback()
		return nil, fmt.Errorf("revision lock: %w", err)
	}
	return tx, nil
}

// bump increments the revision inside tx and returns the new value. On
// PostgreSQL it also queues the NOTIFY of the new revision, delivered when
// tx commits.
func (d *DB) bump(ctx context.Context, tx *sql.Tx) (int64, error) {
	var rev int64
	if err := tx.QueryRowContext(ctx, `UPDATE revision SET value = value + 1 WHERE id = 1 RETURNING value`).Scan(&rev); err != nil {
		return 0, fmt.Errorf("rulesdb: revision: %w", err)
	}
	if d.pg {
		if _, err := tx.ExecContext(ctx, `SELECT pg_notify($1, $2)`, NotifyChannel, strconv.FormatInt(rev, 10)); err != nil {
			return 0, fmt.Errorf("rulesdb: revision: notify: %w", err)
		}
	}
	return rev, nil
}
