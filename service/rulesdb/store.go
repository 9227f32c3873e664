package rulesdb

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Errors of the store operations, matched with errors.Is.
var (
	// ErrNotFound: no rule has that ID.
	ErrNotFound = errors.New("rulesdb: rule not found")
	// ErrExists: Create of an ID already stored.
	ErrExists = errors.New("rulesdb: rule already exists")
	// ErrStale: the etag given to Update or Delete is not the rule's.
	ErrStale = errors.New("rulesdb: etag does not match the rule's current etag")
)

// ruleCols are the columns of a rule a write sets, but its lease;
// ruleSelect those a read scans (scanRule).
const (
	ruleCols   = `id, name, dimension, endpoint_pattern, "limit", window_seconds, algorithm, tier, burst, shadow, enabled, revision, created_at, updated_at`
	ruleSelect = ruleCols + `, lease_us`
)

type scanner interface{ Scan(dest ...any) error }

func scanRule(s scanner) (*Rule, error) {
	var r Rule
	var created, updated, leaseUS int64
	if err := s.Scan(&r.ID, &r.Name, &r.Dimension, &r.EndpointPattern, &r.Limit, &r.WindowSeconds, &r.Algorithm,
		&r.Tier, &r.Burst, &r.Shadow, &r.Enabled, &r.Revision, &created, &updated, &leaseUS); err != nil {
		return nil, err
	}
	r.LeaseSeconds = float64(leaseUS) / 1e6
	r.ETag = etagOf(r.Revision)
	r.CreatedAt, r.UpdatedAt = time.UnixMilli(created).UTC(), time.UnixMilli(updated).UTC()
	return &r, nil
}

// Get returns the rule id.
func (d *DB) Get(ctx context.Context, id string) (*Rule, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	r, err := scanRule(d.db.QueryRowContext(ctx, d.q(`SELECT `+ruleSelect+` FROM rules WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: id %q", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("rulesdb: get %q: %w", id, err)
	}
	return r, nil
}

// List returns up to limit rules (1 to 1000) with IDs after cursor, in ID
// order, and the cursor of the next page ("" after the last).
func (d *DB) List(ctx context.Context, cursor string, limit int) ([]*Rule, string, error) {
	if limit < 1 || limit > 1000 {
		return nil, "", fmt.Errorf("rulesdb: limit: must be 1 to 1000, got %d", limit)
	}
	ctx, cancel := d.bound(ctx)
	defer cancel()
	out, err := queryRules(ctx, d.db, "list", d.q(`SELECT `+ruleSelect+` FROM rules WHERE id > ? ORDER BY id LIMIT ?`), cursor, limit+1)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		next = out[limit-1].ID
	}
	return out, next, nil
}

// Create stores r (its ETag, Revision and times are set by the store) and
// returns the stored rule. A rule the engine would reject, alone or with
// the rules already stored, is refused with ErrInvalid naming the field,
// and nothing is written.
func (d *DB) Create(ctx context.Context, actor string, r Rule) (*Rule, error) {
	return d.write(ctx, actor, "rule.create", r.ID, func(ctx context.Context, tx *sql.Tx, cur *Rule, rev int64, now int64) (*Rule, error) {
		if cur != nil {
			return nil, fmt.Errorf("%w: id %q", ErrExists, r.ID)
		}
		r.Revision, r.ETag = rev, etagOf(rev)
		r.CreatedAt, r.UpdatedAt = time.UnixMilli(now).UTC(), time.UnixMilli(now).UTC()
		return &r, d.insertRule(ctx, tx, &r, rev, now)
	}, &r)
}

// Update replaces the rule r.ID if its current etag is ifMatch (ErrStale
// otherwise; "*" matches any), with Create's validation, and returns the
// stored rule with its new etag.
func (d *DB) Update(ctx context.Context, actor string, r Rule, ifMatch string) (*Rule, error) {
	return d.write(ctx, actor, "rule.update", r.ID, func(ctx context.Context, tx *sql.Tx, cur *Rule, rev int64, now int64) (*Rule, error) {
		if cur == nil {
			return nil, fmt.Errorf("%w: id %q", ErrNotFound, r.ID)
		}
		if ifMatch != "*" && ifMatch != cur.ETag {
			return nil, fmt.Errorf("%w: id %q: etag %s, current %s", ErrStale, r.ID, ifMatch, cur.ETag)
		}
		r.Revision, r.ETag = rev, etagOf(rev)
		r.CreatedAt, r.UpdatedAt = cur.CreatedAt, time.UnixMilli(now).UTC()
		return &r, d.updateRule(ctx, tx, &r, rev, now)
	}, &r)
}

// Delete removes the rule id and clears its overrides if its current etag is
// ifMatch ("*" matches any), and returns the revision it committed. The
// remaining rules must still form a valid set.
func (d *DB) Delete(ctx context.Context, actor, id, ifMatch string) (revision int64, err error) {
	_, err = d.write(ctx, actor, "rule.delete", id, func(ctx context.Context, tx *sql.Tx, cur *Rule, rev int64, now int64) (*Rule, error) {
		if cur == nil {
			return nil, fmt.Errorf("%w: id %q", ErrNotFound, id)
		}
		if ifMatch != "*" && ifMatch != cur.ETag {
			return nil, fmt.Errorf("%w: id %q: etag %s, current %s", ErrStale, id, ifMatch, cur.ETag)
		}
		// Cleared, kept as tombstones (see Override.ClearedAt): should a
		// rule of this id come back, an instance that never saw them
		// removes them from the store.
		if _, err := tx.ExecContext(ctx, d.q(`UPDATE overrides SET cleared_at = ?, revision = ? WHERE rule_id = ? AND cleared_at IS NULL`), now, rev, id); err != nil {
			return nil, err
		}
		_, err := tx.ExecContext(ctx, d.q(`DELETE FROM rules WHERE id = ?`), id)
		revision = rev
		return nil, err
	}, nil)
	if err != nil {
		return 0, err
	}
	return revision, nil
}

// storedRule reads the rule id in tx: nil, nil when there is none.
func (d *DB) storedRule(ctx context.Context, tx *sql.Tx, id string) (*Rule, error) {
	r, err := scanRule(tx.QueryRowContext(ctx, d.q(`SELECT `+ruleSelect+` FROM rules WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return r, err
}

// insertRule inserts r, written at revision rev and at now (Unix
// milliseconds).
func (d *DB) insertRule(ctx context.Context, tx *sql.Tx, r *Rule, rev, now int64) error {
	_, err := tx.ExecContext(ctx, d.q(`INSERT INTO rules (`+ruleSelect+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		r.ID, r.Name, r.Dimension, r.EndpointPattern, r.Limit, r.WindowSeconds, r.Algorithm, r.Tier, r.Burst, r.Shadow, r.Enabled, rev, now, now, r.leaseUS())
	return err
}

// updateRule replaces the stored rule r.ID by r, written at revision rev
// and at now (Unix milliseconds); its creation time stays.
func (d *DB) updateRule(ctx context.Context, tx *sql.Tx, r *Rule, rev, now int64) error {
	_, err := tx.ExecContext(ctx, d.q(`UPDATE rules SET name = ?, dimension = ?, endpoint_pattern = ?, "limit" = ?, window_seconds = ?,
		algorithm = ?, tier = ?, burst = ?, shadow = ?, enabled = ?, revision = ?, updated_at = ?, lease_us = ? WHERE id = ?`),
		r.Name, r.Dimension, r.EndpointPattern, r.Limit, r.WindowSeconds, r.Algorithm, r.Tier, r.Burst, r.Shadow, r.Enabled, rev, now, r.leaseUS(), r.ID)
	return err
}

type change func(ctx context.Context, tx *sql.Tx, cur *Rule, rev int64, now int64) (*Rule, error)

// write runs one rule change in a transaction, within the DB's timeout: it
// validates next (nil for a delete) alone, bumps the revision, applies
// change, checks the resulting rule set as the engine would (the rules the
// change can conflict with: see checkRelated) and appends the audit row.
func (d *DB) write(ctx context.Context, actor, action, id string, apply change, next *Rule) (*Rule, error) {
	if strings.TrimSpace(actor) == "" {
		return nil, errors.New("rulesdb: actor: required")
	}
	if next != nil {
		if err := validateRow(next); err != nil {
			return nil, err
		}
	}
	ctx, cancel := d.bound(ctx)
	defer cancel()
	tx, err := d.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("rulesdb: %s: begin: %w", action, err)
	}
	defer func() { _ = tx.Rollback() }()
	cur, err := d.storedRule(ctx, tx, id)
	if err != nil {
		return nil, fmt.Errorf("rulesdb: %s: %w", action, err)
	}
	rev, err := d.bump(ctx, tx)
	if err != nil {
		return nil, err
	}
	now := d.now().UnixMilli()
	after, err := apply(ctx, tx, cur, rev, now)
	if err != nil {
		if errors.Is(err, ErrExists) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrStale) {
			return nil, err
		}
		return nil, fmt.Errorf("rulesdb: %s: %w", action, err)
	}
	related := relatedKeys{}
	related.add(cur)
	related.add(after)
	if err := d.checkRelated(ctx, tx, rev, related); err != nil {
		return nil, err
	}
	if err := d.audit(ctx, tx, rev, now, actor, action, "rule/"+id, cur, after); err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("rulesdb: %s: commit: %w", action, err)
	}
	return after, nil
}

// MaxEndpointPattern bounds a rule's endpoint pattern, in bytes: the
// engine takes no longer endpoint in a check (engine.MaxEndpoint), and
// PostgreSQL indexes the pattern with the dimension (rules_related,
// migration 4), whose B-tree entries are at most about 2.7 kB.
const MaxEndpointPattern = 2048

// validateRow checks one rule on its own, enabled or not: what the engine
// would refuse of it whatever else is stored.
func validateRow(r *Rule) error {
	for _, f := range [...]struct{ name, v string }{{"id", r.ID}, {"name", r.Name}, {"dimension", r.Dimension},
		{"endpoint_pattern", r.EndpointPattern}, {"algorithm", r.Algorithm}, {"tier", r.Tier}} {
		if !utf8.ValidString(f.v) {
			return invalidRule(r.ID, f.name, "not valid UTF-8")
		}
	}
	if r.Tier != "" && strings.TrimSpace(r.Tier) == "" {
		return invalidRule(r.ID, "tier", "must not be blank")
	}
	if len(r.EndpointPattern) > MaxEndpointPattern {
		return invalidRule(r.ID, "endpoint_pattern", "at most %d bytes, got %d", MaxEndpointPattern, len(r.EndpointPattern))
	}
	alone := *r
	alone.Enabled, alone.Tier = true, ""
	_, err := snapshot(0, []*Rule{&alone}, nil)
	return err
}

// audit appends the audit row of revision rev. An actor or target that
// is not valid UTF-8 (or holds a NUL) is refused: PostgreSQL's text takes
// neither, SQLite would keep bytes no reader can compare.
func (d *DB) audit(ctx context.Context, tx *sql.Tx, rev, now int64, actor, action, target string, before, after any) error {
	for _, f := range [...]struct{ name, v string }{{"actor", actor}, {"target", target}} {
		if !utf8.ValidString(f.v) || strings.IndexByte(f.v, 0) >= 0 {
			return fmt.Errorf("rulesdb: audit: %s: must be valid UTF-8 without NUL", f.name)
		}
	}
	enc := func(v any) (sql.NullString, error) {
		if v == nil {
			return sql.NullString{}, nil
		}
		b, err := json.Marshal(v)
		return sql.NullString{String: string(b), Valid: true}, err
	}
	var b, a sql.NullString
	var err error
	if r, ok := before.(*Rule); !ok || r != nil {
		if b, err = enc(before); err != nil {
			return fmt.Errorf("rulesdb: audit: %w", err)
		}
	}
	if r, ok := after.(*Rule); !ok || r != nil {
		if a, err = enc(after); err != nil {
			return fmt.Errorf("rulesdb: audit: %w", err)
		}
	}
	var reqID sql.NullString
	if id := RequestID(ctx); id != "" {
		reqID = sql.NullString{String: id, Valid: true}
	}
	if _, err := tx.ExecContext(ctx, d.q(`INSERT INTO audit (revision, at, actor, action, target, before_json, after_json, request_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`),
		rev, now, actor, action, target, b, a, reqID); err != nil {
		return fmt.Errorf("rulesdb: audit: %w", err)
	}
	return d.markApplied(ctx, tx, rev)
}

// AuditEntry is one row of the audit log.
type AuditEntry struct {
	Revision int64           `json:"revision"`
	At       time.Time       `json:"at"`
	Actor    string          `json:"actor"`
	Action   string          `json:"action"`
	Target   string          `json:"target"`
	Before   json.RawMessage `json:"before,omitempty"`
	After    json.RawMessage `json:"after,omitempty"`
	// RequestID is the id of the admin request that made the change (see
	// WithRequestID); "" for changes made outside a request (the CLI).
	RequestID string `json:"request_id,omitempty"`
}

// Audit returns up to limit audit entries (1 to 1000) with revisions after
// since, oldest first.
func (d *DB) Audit(ctx context.Context, since int64, limit int) ([]AuditEntry, error) {
	if limit < 1 || limit > 1000 {
		return nil, fmt.Errorf("rulesdb: limit: must be 1 to 1000, got %d", limit)
	}
	ctx, cancel := d.bound(ctx)
	defer cancel()
	rows, err := d.db.QueryContext(ctx, d.q(`SELECT `+auditColumns+` FROM audit WHERE revision > ? ORDER BY revision LIMIT ?`), since, limit)
	if err != nil {
		return nil, fmt.Errorf("rulesdb: audit: %w", err)
	}
	return scanAudit(rows)
}

// auditColumns are the columns scanAudit reads, in its order.
const auditColumns = `revision, at, actor, action, target, before_json, after_json, request_id`

// scanAudit reads the audit entries of rows (auditColumns) and closes it.
func scanAudit(rows *sql.Rows) ([]AuditEntry, error) {
	defer func() { _ = rows.Close() }()
	var out []AuditEntry
	for rows.Next() {
		var e AuditEntry
		var at int64
		var b, a, reqID sql.NullString
		if err := rows.Scan(&e.Revision, &at, &e.Actor, &e.Action, &e.Target, &b, &a, &reqID); err != nil {
			return nil, fmt.Errorf("rulesdb: audit: %w", err)
		}
		e.At = time.UnixMilli(at).UTC()
		e.RequestID = reqID.String
		if b.Valid {
			e.Before = json.RawMessage(b.String)
		}
		if a.Valid {
			e.After = json.RawMessage(a.String)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("rulesdb: audit: %w", err)
	}
	return out, nil
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// loadRules reads every rule, in ID order.
func loadRules(ctx context.Context, q querier) ([]*Rule, error) {
	return queryRules(ctx, q, "load rules", `SELECT `+ruleSelect+` FROM rules ORDER BY id`)
}

// queryRules runs query (selecting ruleCols) and scans its rows; errors
// say what the query was for.
func queryRules(ctx context.Context, q querier, what, query string, args ...any) ([]*Rule, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("rulesdb: %s: %w", what, err)
	}
	defer func() { _ = rows.Close() }()
	var out []*Rule
	for rows.Next() {
		r, err := scanRule(rows)
		if err != nil {
			return nil, fmt.Errorf("rulesdb: %s: %w", what, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("rulesdb: %s: %w", what, err)
	}
	return out, nil
}

// loadTiers reads the user tier assignments: dimension -> identifier -> tier.
func loadTiers(ctx context.Context, q querier) (map[string]map[string]string, error) {
	rows, err := q.QueryContext(ctx, `SELECT dimension, identifier, tier FROM user_tiers`)
	if err != nil {
		return nil, fmt.Errorf("rulesdb: load tiers: %w", err)
	}
	defer func() { _ = rows.Close() }()
	out := map[string]map[string]string{}
	for rows.Next() {
		var dim, id, tier string
		if err := rows.Scan(&dim, &id, &tier); err != nil {
			return nil, fmt.Errorf("rulesdb: load tiers: %w", err)
		}
		if out[dim] == nil {
			out[dim] = map[string]string{}
		}
		out[dim][id] = tier
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("rulesdb: load tiers: %w", err)
	}
	return out, nil
}

// relatedKey is what relates stored rules in the engine's check of a rule
// set: a dimension and endpoint pattern, whose enabled rows must be one
// base without a tier and tier rows of distinct tiers.
type relatedKey struct{ dim, ep string }

// relatedKeys are the keys of the rows a write changed, before and after.
type relatedKeys map[relatedKey]bool

func (k relatedKeys) add(r *Rule) {
	if r != nil {
		k[relatedKey{r.Dimension, r.EndpointPattern}] = true
	}
}

// maxRelatedKeys bounds the keys checkRelated reads with one query; a
// write touching more (a large import) checks the whole rule set.
const maxRelatedKeys = 64

// checkRelated checks, inside tx after a write, the stored rules that the
// written rows can conflict with, as the engine would check the whole
// resulting set: the rows of each dimension and endpoint pattern the
// write changed, before and after (the engine relates no others: the
// rest was valid before the write and is unchanged; every row alone is
// checked before it is written). The rows are read with the index of
// migration 4 in ID order, as the whole-set check reads them, so the
// refusals are the same. More than maxRelatedKeys keys: the whole set.
func (d *DB) checkRelated(ctx context.Context, tx *sql.Tx, rev int64, keys relatedKeys) error {
	if len(keys) > maxRelatedKeys {
		all, err := loadRules(ctx, tx)
		if err != nil {
			return err
		}
		tiers, err := loadTiers(ctx, tx)
		if err != nil {
			return err
		}
		_, err = snapshot(rev, all, tiers)
		return err
	}
	if len(keys) == 0 {
		return nil
	}
	var where []string
	var args []any
	for k := range keys {
		where = append(where, "(dimension = ? AND endpoint_pattern = ?)")
		args = append(args, k.dim, k.ep)
	}
	rows, err := queryRules(ctx, tx, "check rules", d.q(`SELECT `+ruleSelect+` FROM rules WHERE `+strings.Join(where, " OR ")+` ORDER BY id`), args...)
	if err != nil {
		return err
	}
	_, err = snapshot(rev, rows, nil)
	return err
}
