package rulesdb

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sluicehq/sluice/service/internal/rawtext"
)

// ReadRules decodes a JSON array of rules (the admin API's shape; unknown
// fields are refused). A rule without "enabled" is enabled. Text that is
// not valid UTF-8 (raw bytes, or an unpaired surrogate escape, which
// decoding would turn into U+FFFD) is refused with ErrInvalid naming the
// field (rules[3].name), before anything is decoded.
func ReadRules(r io.Reader) ([]Rule, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("rulesdb: rules: %w", err)
	}
	if inv := rawtext.JSON(b, "rules"); inv != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, inv)
	}
	var raw []json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("rulesdb: rules: want a JSON array of rules: %w", err)
	}
	out := make([]Rule, 0, len(raw))
	for i, m := range raw {
		r := Rule{Enabled: true}
		d := json.NewDecoder(bytes.NewReader(m))
		d.DisallowUnknownFields()
		if err := d.Decode(&r); err != nil {
			return nil, fmt.Errorf("rulesdb: rules[%d]: %w", i, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// WriteRules encodes rules as the indented JSON array ReadRules reads.
func WriteRules(w io.Writer, rs []*Rule) error {
	if rs == nil {
		rs = []*Rule{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rs)
}

// Import creates or replaces each rule of rs in ONE transaction: every rule
// is written, or none is. Each rule is one change with its own revision
// and audit row ("rule.create" or "rule.update"); each is checked alone as
// Create checks it, and the resulting rule set as a whole, before the
// commit. On a refusal nothing is written and the error names the rule
// (rules[i] in the order given) and the field; n is the number of rules
// written: len(rs), or 0.
func (d *DB) Import(ctx context.Context, actor string, rs []Rule) (n int, err error) {
	if strings.TrimSpace(actor) == "" {
		return 0, errors.New("rulesdb: actor: required")
	}
	if err := validateImport(rs); err != nil {
		return 0, err
	}
	ctx, cancel := d.bound(ctx)
	defer cancel()
	tx, err := d.begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("rulesdb: import: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	var last int64
	related := relatedKeys{}
	for i := range rs {
		cur, r, err := d.importRule(ctx, tx, actor, i, rs[i])
		if err != nil {
			return 0, err
		}
		related.add(cur)
		related.add(r)
		last = r.Revision
	}
	if err := d.checkRelated(ctx, tx, last, related); err != nil {
		return 0, fmt.Errorf("rulesdb: import: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("rulesdb: import: commit: %w", err)
	}
	return len(rs), nil
}

// validateImport checks each rule of rs alone, and that no two have one
// ID; the error names the rule as rules[i].
func validateImport(rs []Rule) error {
	seen := make(map[string]int, len(rs))
	for i := range rs {
		if err := validateRow(&rs[i]); err != nil {
			return fmt.Errorf("rulesdb: rules[%d]: %w", i, err)
		}
		if j, dup := seen[rs[i].ID]; dup {
			return invalidField(fmt.Sprintf("rules[%d].id", i), "%q is also rules[%d]", rs[i].ID, j)
		}
		seen[rs[i].ID] = i
	}
	return nil
}

// importRule writes r, rules[i] of an Import by actor, in tx at a
// revision of its own with its audit row: created, or replacing cur, the
// rule stored with its ID. It returns cur (nil when none) and the rule
// written.
func (d *DB) importRule(ctx context.Context, tx *sql.Tx, actor string, i int, r Rule) (cur, written *Rule, err error) {
	cur, err = d.storedRule(ctx, tx, r.ID)
	if err != nil {
		return nil, nil, fmt.Errorf("rulesdb: import: rules[%d]: %w", i, err)
	}
	rev, err := d.bump(ctx, tx)
	if err != nil {
		return nil, nil, err
	}
	now := d.now().UnixMilli()
	r.Revision, r.ETag = rev, etagOf(rev)
	r.UpdatedAt = time.UnixMilli(now).UTC()
	action := "rule.create"
	if cur == nil {
		r.CreatedAt = r.UpdatedAt
		err = d.insertRule(ctx, tx, &r, rev, now)
	} else {
		action = "rule.update"
		r.CreatedAt = cur.CreatedAt
		err = d.updateRule(ctx, tx, &r, rev, now)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("rulesdb: import: rules[%d]: %w", i, err)
	}
	if err := d.audit(ctx, tx, rev, now, actor, action, "rule/"+r.ID, cur, &r); err != nil {
		return nil, nil, err
	}
	return cur, &r, nil
}

// All returns every stored rule, in ID order.
func (d *DB) All(ctx context.Context) ([]*Rule, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	return loadRules(ctx, d.db)
}
