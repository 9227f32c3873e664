package rulesdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
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
// blank tier is refused with ErrInvalid naming the field.
func (d *DB) SetTier(ctx context.Context, actor, dimension, identifier, tier string) error {
	switch {
	case strings.TrimSpace(actor) == "":
		return errors.New("rulesdb: actor: required")
	case identifier == "":
		return fmt.Errorf("%w: identifier: required", ErrInvalid)
	case len(identifier) > MaxOverrideIdentifier:
		return fmt.Errorf("%w: identifier: longer than %d bytes", ErrInvalid, MaxOverrideIdentifier)
	case tier != "" && strings.TrimSpace(tier) == "":
		return fmt.Errorf("%w: tier: must not be blank", ErrInvalid)
	}
	if err := storableIdentifier(identifier); err != nil {
		return err
	}
	if _, err := snapshot(0, nil, map[string]map[string]string{dimension: {identifier: "x"}}); err != nil {
		return err // names tier_assignments.<dimension>
	}
	ctx, cancel := d.bound(ctx)
	defer cancel()
	tx, err := d.begin(ctx)
	if err != nil {
		return fmt.Errorf("rulesdb: tier.set: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	var cur string
	err = tx.QueryRowContext(ctx, d.q(`SELECT tier FROM user_tiers WHERE dimension = ? AND identifier = ?`), dimension, identifier).Scan(&cur)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("rulesdb: tier.set: %w", err)
	}
	if cur == tier {
		return nil // nothing changes: no revision, no audit row
	}
	rev, err := d.bump(ctx, tx)
	if err != nil {
		return err
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
		return fmt.Errorf("rulesdb: %s: %w", action, err)
	}
	var before, after any
	if cur != "" {
		before = TierAssignment{dimension, identifier, cur}
	}
	if tier != "" {
		after = TierAssignment{dimension, identifier, tier}
	}
	if err := d.audit(ctx, tx, rev, now, actor, action, "tier/"+dimension+"/"+identifier, before, after); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("rulesdb: %s: commit: %w", action, err)
	}
	return nil
}
