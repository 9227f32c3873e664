package rulesdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// ErrSchemaTooNew is returned by Open for a database whose schema is newer
// than this build knows: it was migrated by a newer ratelimitd.
var ErrSchemaTooNew = errors.New("rulesdb: database schema is newer than this ratelimitd supports")

// migrations are the schema's steps, in order: migrations[i] takes the
// schema from version i to i+1. Append only; never edit a released step.
// The SQL runs on SQLite and PostgreSQL alike (quoted "limit", BIGINT
// times in Unix milliseconds, no AUTOINCREMENT).
var migrations = [][]string{
	{ // 1: rules, tiers, overrides, audit, the revision counter
		`CREATE TABLE revision (
			id INTEGER PRIMARY KEY CHECK (id = 1),
			value BIGINT NOT NULL)`,
		`INSERT INTO revision (id, value) VALUES (1, 0)`,
		`CREATE TABLE rules (
			id TEXT PRIMARY KEY,
			name TEXT NOT NULL,
			dimension TEXT NOT NULL,
			endpoint_pattern TEXT NOT NULL DEFAULT '',
			"limit" BIGINT NOT NULL,
			window_seconds BIGINT NOT NULL,
			algorithm TEXT NOT NULL,
			tier TEXT NOT NULL DEFAULT '',
			burst BIGINT NOT NULL DEFAULT 0,
			shadow BOOLEAN NOT NULL DEFAULT FALSE,
			enabled BOOLEAN NOT NULL DEFAULT TRUE,
			revision BIGINT NOT NULL,
			created_at BIGINT NOT NULL,
			updated_at BIGINT NOT NULL)`,
		`CREATE TABLE user_tiers (
			dimension TEXT NOT NULL,
			identifier TEXT NOT NULL,
			tier TEXT NOT NULL,
			revision BIGINT NOT NULL,
			updated_at BIGINT NOT NULL,
			PRIMARY KEY (dimension, identifier))`,
		`CREATE TABLE overrides (
			dimension TEXT NOT NULL,
			identifier TEXT NOT NULL,
			rule_id TEXT NOT NULL,
			"limit" BIGINT NOT NULL,
			window_seconds BIGINT NOT NULL,
			block BOOLEAN NOT NULL DEFAULT FALSE,
			expires_at BIGINT NOT NULL,
			revision BIGINT NOT NULL,
			created_at BIGINT NOT NULL,
			PRIMARY KEY (dimension, identifier, rule_id))`,
		`CREATE INDEX overrides_expiry ON overrides (expires_at)`,
		`CREATE TABLE audit (
			revision BIGINT PRIMARY KEY,
			at BIGINT NOT NULL,
			actor TEXT NOT NULL,
			action TEXT NOT NULL,
			target TEXT NOT NULL,
			before_json TEXT,
			after_json TEXT)`,
	},
	{ // 2: admin tokens, idempotency keys of admin POSTs, the request id of each audit row
		`CREATE TABLE tokens (
			name TEXT PRIMARY KEY,
			hash TEXT NOT NULL UNIQUE,
			scope TEXT NOT NULL,
			created_at BIGINT NOT NULL,
			revoked_at BIGINT)`,
		`CREATE TABLE idempotency (
			token TEXT NOT NULL,
			"key" TEXT NOT NULL,
			request_hash TEXT NOT NULL,
			status INTEGER NOT NULL,
			header_json TEXT,
			body TEXT,
			revision BIGINT,
			created_at BIGINT NOT NULL,
			PRIMARY KEY (token, "key"))`,
		`CREATE INDEX idempotency_created ON idempotency (created_at)`,
		`ALTER TABLE audit ADD COLUMN request_id TEXT`,
	},
	{ // 3: a cleared override is kept (its tombstone) until its expiry, so
		// that an instance starting after the clear removes it from the store
		`ALTER TABLE overrides ADD COLUMN cleared_at BIGINT`,
	},
	{ // 4: the indexes of incremental loads (the rows written after a
		// revision) and of the writes' check (the rules of one dimension
		// and endpoint pattern)
		`CREATE INDEX rules_related ON rules (dimension, endpoint_pattern)`,
		`CREATE INDEX rules_revision ON rules (revision)`,
		`CREATE INDEX user_tiers_revision ON user_tiers (revision)`,
		`CREATE INDEX overrides_revision ON overrides (revision)`,
	},
	{ // 5: a rule's lease (its core.Policy.Lease), in microseconds; 0: none
		`ALTER TABLE rules ADD COLUMN lease_us BIGINT NOT NULL DEFAULT 0`,
	},
	{ // 6: the indexes of the audit's filters (newest first by revision
		// within an actor, action or target) and of its retention (by time)
		`CREATE INDEX audit_actor ON audit (actor, revision)`,
		`CREATE INDEX audit_action ON audit (action, revision)`,
		`CREATE INDEX audit_target ON audit (target, revision)`,
		`CREATE INDEX audit_at ON audit (at)`,
	},
}

// SchemaVersion is the schema version this build creates and reads.
func SchemaVersion() int { return len(migrations) }

// migrateLock is the key of the PostgreSQL advisory lock migrations take
// ("sluice" in ASCII).
const migrateLock = 0x736c75696365

// migrate brings the schema up to SchemaVersion, each step in its own
// transaction together with its schema_version row. On PostgreSQL each
// transaction first takes a transaction-scoped advisory lock, so that of
// instances starting at once one migrates and the others wait and then
// find the step done.
func (d *DB) migrate(ctx context.Context) error {
	for {
		done, err := d.migrateStep(ctx)
		if err != nil || done {
			return err
		}
	}
}

// migrateStep applies the next migration; done reports that none is left.
func (d *DB) migrateStep(ctx context.Context) (done bool, err error) {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("rulesdb: migrate: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if d.pg {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrateLock)); err != nil {
			return false, fmt.Errorf("rulesdb: migrate: advisory lock: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)`); err != nil {
		return false, fmt.Errorf("rulesdb: schema_version: %w", err)
	}
	var v sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_version`).Scan(&v); err != nil {
		return false, fmt.Errorf("rulesdb: schema_version: %w", err)
	}
	cur := int(v.Int64)
	switch {
	case cur > len(migrations):
		return false, fmt.Errorf("%w: schema_version is %d, this build knows up to %d", ErrSchemaTooNew, cur, len(migrations))
	case cur == len(migrations):
		return true, nil
	}
	for i, stmt := range migrations[cur] {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return false, fmt.Errorf("rulesdb: migration %d step %d: %w", cur+1, i+1, err)
		}
	}
	if _, err := tx.ExecContext(ctx, d.q(`INSERT INTO schema_version (version) VALUES (?)`), cur+1); err != nil {
		return false, fmt.Errorf("rulesdb: migration %d: schema_version: %w", cur+1, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("rulesdb: migration %d: commit: %w", cur+1, err)
	}
	return false, nil
}
