package rulesdb

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// The actions of the changes Record writes, made outside the database: on
// the service's store, through its gRPC API.
const (
	// ActionLimitReset is the native API's ResetLimit: an identifier's
	// counters forgotten under the rules that match.
	ActionLimitReset = "limit.reset"
	// ActionStoreReset, ActionStoreOverrideSet and ActionStoreOverrideClear
	// are the store API's Reset, SetOverride and ClearOverride.
	ActionStoreReset         = "store.reset"
	ActionStoreOverrideSet   = "store.override.set"
	ActionStoreOverrideClear = "store.override.clear"
)

// recordedActions are the actions a Record may write: the audit rows an
// incremental load knows to change no rule, tier or override.
var recordedActions = map[string]bool{
	ActionLimitReset: true, ActionStoreReset: true, ActionStoreOverrideSet: true, ActionStoreOverrideClear: true,
}

// ErrNotRecorded is returned by Record when apply made its change but the
// audit row could not be committed: the change is in force without its
// row. Every change Record is for is idempotent (a reset, setting or
// clearing an override): the caller answers a failure and the client's
// retry writes the row.
var ErrNotRecorded = errors.New("rulesdb: the change was made but its audit row could not be committed")

// Record makes a change that lives outside the database (on the service's
// store) together with its audit row: in one transaction it bumps the
// revision and writes the row (actor, action, target, before and after as
// JSON, the request id of ctx), then calls apply, then commits. When the
// row cannot be written apply is not called and nothing changes; when apply
// fails its error is returned and the row rolled back; when the commit
// fails after apply, the error wraps ErrNotRecorded. The transaction is
// held while apply runs: bound apply (the store's timeout). action is one
// of the Action constants above.
func (d *DB) Record(ctx context.Context, actor, action, target string, before, after any, apply func(context.Context) error) error {
	switch {
	case strings.TrimSpace(actor) == "":
		return errors.New("rulesdb: actor: required")
	case !recordedActions[action]:
		return fmt.Errorf("rulesdb: action: %q is not a recorded change", action)
	}
	tx, err := d.begin(ctx)
	if err != nil {
		return fmt.Errorf("rulesdb: %s: begin: %w", action, err)
	}
	defer func() { _ = tx.Rollback() }()
	rev, err := d.bump(ctx, tx)
	if err != nil {
		return err
	}
	if err := d.audit(ctx, tx, rev, d.now().UnixMilli(), actor, action, target, before, after); err != nil {
		return err
	}
	if err := apply(ctx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%w: %s %s: %w", ErrNotRecorded, action, target, err)
	}
	return nil
}
