package rulesdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/rules"
)

// Override is a temporary limit (or a block) of one rule for one caller,
// in force until ExpiresAt.
type Override struct {
	Dimension     string    `json:"dimension"`
	Identifier    string    `json:"identifier"`
	RuleID        string    `json:"rule_id"`
	Limit         int64     `json:"limit"`
	WindowSeconds int64     `json:"window_seconds"`
	Block         bool      `json:"block"`
	ExpiresAt     time.Time `json:"expires_at"`
	Revision      int64     `json:"revision,omitempty"`
	// ClearedAt is when the override was cleared before its expiry (by
	// ClearOverride, or with its rule by Delete): zero while it is in
	// force. A cleared override is kept until ExpiresAt as a tombstone,
	// which Overrides never returns: it reaches the engine (a lapsed
	// rules.Override, Until its clear) so that an instance that did not
	// see it set (it started after the clear, with a store that outlives
	// instances, Redis) still removes it from the store.
	ClearedAt time.Time `json:"cleared_at,omitzero"`
}

// storableIdentifier refuses an identifier both backends cannot store
// alike (PostgreSQL's text takes neither a NUL byte nor invalid UTF-8).
func storableIdentifier(id string) error {
	switch {
	case !utf8.ValidString(id):
		return invalidField("identifier", "not valid UTF-8")
	case strings.IndexByte(id, 0) >= 0:
		return invalidField("identifier", "must not contain a NUL byte")
	}
	return nil
}

// MaxOverrideIdentifier bounds an override's identifier, in bytes: the
// rules snapshot refuses a longer one (as the engine refuses a longer
// identifier in a check).
const MaxOverrideIdentifier = 1024

// SetOverride stores o (replacing the caller's override of that rule), in
// one transaction with its audit row. The rule must exist; the limit is
// checked with the rule's algorithm (a Block has none); ExpiresAt must be
// in the future. Refusals wrap ErrInvalid and name the field. It returns
// the revision it committed.
func (d *DB) SetOverride(ctx context.Context, actor string, o Override) (revision int64, err error) {
	now := d.now()
	if err := validOverride(actor, o, now); err != nil {
		return 0, err
	}
	ctx, cancel := d.bound(ctx)
	defer cancel()
	tx, err := d.begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("rulesdb: override.set: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	rule, err := scanRule(tx.QueryRowContext(ctx, d.q(`SELECT `+ruleSelect+` FROM rules WHERE id = ?`), o.RuleID))
	if errors.Is(err, sql.ErrNoRows) {
		return 0, invalidField("rule_id", "no rule %q", o.RuleID)
	}
	if err != nil {
		return 0, fmt.Errorf("rulesdb: override.set: %w", err)
	}
	if rule.Dimension != o.Dimension {
		return 0, invalidField("dimension", "rule %q is for dimension %q, got %q", o.RuleID, rule.Dimension, o.Dimension)
	}
	if !o.Block {
		probe := *rule
		probe.Limit, probe.WindowSeconds, probe.Burst = o.Limit, o.WindowSeconds, 0
		if _, err := probe.limit(); err != nil {
			return 0, err
		}
	}
	before, err := d.override(ctx, tx, o.Dimension, o.Identifier, o.RuleID)
	if err != nil {
		return 0, err
	}
	rev, err := d.bump(ctx, tx)
	if err != nil {
		return 0, err
	}
	o.Revision = rev
	o.ExpiresAt = time.UnixMilli(o.ExpiresAt.UnixMilli()).UTC()
	ms := now.UnixMilli()
	if _, err := tx.ExecContext(ctx, d.q(`INSERT INTO overrides (dimension, identifier, rule_id, "limit", window_seconds, block, expires_at, revision, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (dimension, identifier, rule_id) DO UPDATE SET "limit" = excluded."limit", window_seconds = excluded.window_seconds,
		block = excluded.block, expires_at = excluded.expires_at, revision = excluded.revision, created_at = excluded.created_at, cleared_at = NULL`),
		o.Dimension, o.Identifier, o.RuleID, o.Limit, o.WindowSeconds, o.Block, o.ExpiresAt.UnixMilli(), rev, ms); err != nil {
		return 0, fmt.Errorf("rulesdb: override.set: %w", err)
	}
	var b any
	if before != nil {
		b = before
	}
	if err := d.audit(ctx, tx, rev, ms, actor, "override.set", "override/"+o.Dimension+"/"+o.Identifier+"/"+o.RuleID, b, o); err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("rulesdb: override.set: commit: %w", err)
	}
	return rev, nil
}

// validOverride checks SetOverride's arguments before anything is read.
func validOverride(actor string, o Override, now time.Time) error {
	switch {
	case strings.TrimSpace(actor) == "":
		return errors.New("rulesdb: actor: required")
	case o.Identifier == "":
		return invalidField("identifier", "required")
	case len(o.Identifier) > MaxOverrideIdentifier:
		return invalidField("identifier", "at most %d bytes, got %d", MaxOverrideIdentifier, len(o.Identifier))
	}
	if err := storableIdentifier(o.Identifier); err != nil {
		return err
	}
	if !o.ExpiresAt.After(now) {
		return invalidField("expires_at", "must be in the future, got %s", o.ExpiresAt.UTC().Format(time.RFC3339))
	}
	if o.Block && (o.Limit != 0 || o.WindowSeconds != 0) {
		return invalidField("block", "a block has no limit or window_seconds")
	}
	return nil
}

// ClearOverride ends the caller's override of ruleID (ErrNotFound if
// none), with its audit row. Its row is kept as a tombstone until its
// expiry (see Override.ClearedAt). It returns the revision it committed.
func (d *DB) ClearOverride(ctx context.Context, actor, dimension, identifier, ruleID string) (revision int64, err error) {
	if strings.TrimSpace(actor) == "" {
		return 0, errors.New("rulesdb: actor: required")
	}
	ctx, cancel := d.bound(ctx)
	defer cancel()
	tx, err := d.begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("rulesdb: override.clear: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	before, err := d.override(ctx, tx, dimension, identifier, ruleID)
	if err != nil {
		return 0, err
	}
	if before == nil {
		return 0, fmt.Errorf("%w: no override of rule %q for %s %q", ErrNotFound, ruleID, dimension, identifier)
	}
	rev, err := d.bump(ctx, tx)
	if err != nil {
		return 0, err
	}
	now := d.now().UnixMilli()
	if _, err := tx.ExecContext(ctx, d.q(`UPDATE overrides SET cleared_at = ?, revision = ? WHERE dimension = ? AND identifier = ? AND rule_id = ?`),
		now, rev, dimension, identifier, ruleID); err != nil {
		return 0, fmt.Errorf("rulesdb: override.clear: %w", err)
	}
	if err := d.audit(ctx, tx, rev, now, actor, "override.clear", "override/"+dimension+"/"+identifier+"/"+ruleID, before, nil); err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("rulesdb: override.clear: commit: %w", err)
	}
	return rev, nil
}

// Overrides returns the caller's overrides in force at now (expired ones
// are ignored: an override lapses at its instant without any write), by
// rule ID.
func (d *DB) Overrides(ctx context.Context, dimension, identifier string, now time.Time) ([]Override, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	rows, err := d.db.QueryContext(ctx, d.q(`SELECT dimension, identifier, rule_id, "limit", window_seconds, block, expires_at, revision
		FROM overrides WHERE dimension = ? AND identifier = ? AND expires_at > ? AND cleared_at IS NULL ORDER BY rule_id`), dimension, identifier, now.UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("rulesdb: overrides: %w", err)
	}
	defer func() { _ = rows.Close() }()
	var out []Override
	for rows.Next() {
		o, err := scanOverride(rows)
		if err != nil {
			return nil, fmt.Errorf("rulesdb: overrides: %w", err)
		}
		out = append(out, *o)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("rulesdb: overrides: %w", err)
	}
	return out, nil
}

// toRules is o as the engine's override of r (its served rule; nil if the
// rule is not served), or an error saying why it cannot apply. A
// tombstone (a cleared override) is a lapsed override whose Until is its
// clear (at most now, whatever the clocks: it never applies); ok is
// false when it cannot go to the engine (its rule is not served as it
// was), which is no error.
func (o Override) toRules(r *rules.Rule, now time.Time) (_ rules.Override, ok bool, _ error) {
	target := "override/" + o.Dimension + "/" + o.Identifier + "/" + o.RuleID
	if !o.ClearedAt.IsZero() {
		if r == nil || r.Dimension != o.Dimension || len(o.Identifier) > MaxOverrideIdentifier {
			return rules.Override{}, false, nil
		}
		until := o.ClearedAt
		if until.After(now) {
			until = now
		}
		return rules.Override{RuleID: o.RuleID, Dimension: o.Dimension, Identifier: o.Identifier, Until: until, Revision: o.Revision, Cleared: true}, true, nil
	}
	ro, err := o.toRulesActive(r, target)
	return ro, err == nil, err
}

// toRulesActive is toRules of an override not cleared.
func (o Override) toRulesActive(r *rules.Rule, target string) (rules.Override, error) {
	switch {
	case r == nil:
		return rules.Override{}, fmt.Errorf("rulesdb: %s: rule_id: rule %q is not served (missing, disabled or a tier row): override ignored", target, o.RuleID)
	case r.Dimension != o.Dimension:
		return rules.Override{}, fmt.Errorf("rulesdb: %s: dimension: rule %q is now for dimension %q: override ignored", target, o.RuleID, r.Dimension)
	case len(o.Identifier) > MaxOverrideIdentifier:
		return rules.Override{}, fmt.Errorf("rulesdb: override of rule %q: identifier: longer than %d bytes: override ignored", o.RuleID, MaxOverrideIdentifier)
	}
	ro := rules.Override{RuleID: o.RuleID, Dimension: o.Dimension, Identifier: o.Identifier, Until: o.ExpiresAt, Revision: o.Revision}
	if !o.Block {
		ro.Limit = core.Limit{Algorithm: r.Limit.Algorithm, Rate: o.Limit, Period: time.Duration(o.WindowSeconds) * time.Second}
		if err := ro.Limit.Validate(); err != nil {
			return rules.Override{}, fmt.Errorf("rulesdb: %s: limit: %w: override ignored", target, err)
		}
	}
	return ro, nil
}

// loadOverrides reads, for a negative since, every stored override in
// force at now and the tombstones of those cleared before their expiry.
// For since >= 0 (an incremental load) it reads every row written after
// revision since, expired or not: an expired row read must still replace
// the earlier row of its key, whose expiry may be later (see readDelta).
func loadOverrides(ctx context.Context, q querier, d *DB, now time.Time, since int64) ([]Override, error) {
	query, args := `SELECT dimension, identifier, rule_id, "limit", window_seconds, block, expires_at, revision, cleared_at
		FROM overrides WHERE expires_at > ?`, []any{now.UnixMilli()}
	if since >= 0 {
		query, args = `SELECT dimension, identifier, rule_id, "limit", window_seconds, block, expires_at, revision, cleared_at
		FROM overrides WHERE revision > ?`, []any{since}
	}
	rows, err := q.QueryContext(ctx, d.q(query+` ORDER BY dimension, identifier, rule_id`), args...)
	if err != nil {
		return nil, fmt.Errorf("rulesdb: load overrides: %w", err)
	}
	defer func() { _ = rows.Close() }()
	var out []Override
	for rows.Next() {
		o, err := scanOverrideRow(rows)
		if err != nil {
			return nil, fmt.Errorf("rulesdb: load overrides: %w", err)
		}
		out = append(out, *o)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("rulesdb: load overrides: %w", err)
	}
	return out, nil
}

func scanOverride(s scanner) (*Override, error) {
	var o Override
	var exp int64
	if err := s.Scan(&o.Dimension, &o.Identifier, &o.RuleID, &o.Limit, &o.WindowSeconds, &o.Block, &exp, &o.Revision); err != nil {
		return nil, err
	}
	o.ExpiresAt = time.UnixMilli(exp).UTC()
	return &o, nil
}

// scanOverrideRow is scanOverride of a row that also has cleared_at.
func scanOverrideRow(s scanner) (*Override, error) {
	var o Override
	var exp int64
	var cleared sql.NullInt64
	if err := s.Scan(&o.Dimension, &o.Identifier, &o.RuleID, &o.Limit, &o.WindowSeconds, &o.Block, &exp, &o.Revision, &cleared); err != nil {
		return nil, err
	}
	o.ExpiresAt = time.UnixMilli(exp).UTC()
	if cleared.Valid {
		o.ClearedAt = time.UnixMilli(cleared.Int64).UTC()
	}
	return &o, nil
}

// override reads one stored override not cleared (expired or not) inside
// tx; nil if none.
func (d *DB) override(ctx context.Context, tx *sql.Tx, dimension, identifier, ruleID string) (*Override, error) {
	o, err := scanOverride(tx.QueryRowContext(ctx, d.q(`SELECT dimension, identifier, rule_id, "limit", window_seconds, block, expires_at, revision
		FROM overrides WHERE dimension = ? AND identifier = ? AND rule_id = ? AND cleared_at IS NULL`), dimension, identifier, ruleID))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("rulesdb: override: %w", err)
	}
	return o, nil
}
