package rulesdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// TierAssignment is a caller's tier: the identifier of a dimension.
type TierAssignment struct {
	Dimension  string `json:"dimension"`
	Identifier string `json:"identifier"`
	Tier       string `json:"tier"`
}

// SetTier assigns identifier of dimension to tier ("" removes the
// assignment), in one transaction with its audit row. An invalid
// dimension, an identifier over MaxOverrideIdentifier bytes (the engine
// takes no longer one; PostgreSQL could not index a much longer one) or a
// blank tier is refused with ErrInvalid naming the field. It returns the
// revision it committed or, when the caller already has that tier (nothing
// is written), the database's revision: the state asked for holds from
// that revision on.
func (d *DB) SetTier(ctx context.Context, actor, dimension, identifier, tier string) (revision int64, err error) {
	if err := validTierAssignment(actor, dimension, identifier, tier); err != nil {
		return 0, err
	}
	ctx, cancel := d.bound(ctx)
	defer cancel()
	tx, err := d.begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("rulesdb: tier.set: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	var cur string
	err = tx.QueryRowContext(ctx, d.q(`SELECT tier FROM user_tiers WHERE dimension = ? AND identifier = ?`), dimension, identifier).Scan(&cur)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("rulesdb: tier.set: %w", err)
	}
	if cur == tier {
		// Nothing changes: no revision, no audit row.
		if err := tx.QueryRowContext(ctx, `SELECT value FROM revision WHERE id = 1`).Scan(&revision); err != nil {
			return 0, fmt.Errorf("rulesdb: tier.set: revision: %w", err)
		}
		return revision, nil
	}
	rev, err := d.bump(ctx, tx)
	if err != nil {
		return 0, err
	}
	now := d.now().UnixMilli()
	action := "tier.set"
	if tier == "" {
		action = "tier.clear"
		_, err = tx.ExecContext(ctx, d.q(`DELETE FROM user_tiers WHERE dimension = ? AND identifier = ?`), dimension, identifier)
	} else {
		_, err = tx.ExecContext(ctx, d.q(`INSERT INTO user_tiers (dimension, identifier, tier, revision, updated_at) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (dimension, identifier) DO UPDATE SET tier = excluded.tier, revision = excluded.revision, updated_at = excluded.updated_at`),
			dimension, identifier, tier, rev, now)
	}
	if err != nil {
		return 0, fmt.Errorf("rulesdb: %s: %w", action, err)
	}
	var before, after any
	if cur != "" {
		before = TierAssignment{dimension, identifier, cur}
	}
	if tier != "" {
		after = TierAssignment{dimension, identifier, tier}
	}
	if err := d.audit(ctx, tx, rev, now, actor, action, "tier/"+dimension+"/"+identifier, before, after); err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("rulesdb: %s: commit: %w", action, err)
	}
	return rev, nil
}

// validTierAssignment checks SetTier's arguments before anything is read.
func validTierAssignment(actor, dimension, identifier, tier string) error {
	switch {
	case strings.TrimSpace(actor) == "":
		return errors.New("rulesdb: actor: required")
	case identifier == "":
		return invalidField("identifier", "required")
	case len(identifier) > MaxOverrideIdentifier:
		return invalidField("identifier", "longer than %d bytes", MaxOverrideIdentifier)
	case tier != "" && strings.TrimSpace(tier) == "":
		return invalidField("tier", "must not be blank")
	case !utf8.ValidString(tier):
		return invalidField("tier", "not valid UTF-8")
	}
	if err := storableIdentifier(identifier); err != nil {
		return err
	}
	_, err := snapshot(0, nil, map[string]map[string]string{dimension: {identifier: "x"}})
	return err // names dimension
}
