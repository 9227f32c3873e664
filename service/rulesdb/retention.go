package rulesdb

import (
	"context"
	"fmt"
	"time"
)

// pruneBatch is how many audit rows one statement of PruneAudit deletes:
// each is its own short transaction, so a prune of millions of rows never
// holds the database's write lock (SQLite) for long between writes.
const pruneBatch = 1000

// PruneAudit deletes the audit rows written before cutoff, oldest first,
// in transactions of at most pruneBatch rows, each bounded by the DB's
// timeout, and returns how many it deleted (those deleted before an error
// included). Nothing else is touched: no rule, tier, override or token
// row, and not the revision, which never goes back (the next write takes
// the next revision whatever rows are left).
//
// Incremental loads stay exact: a load reads the audit rows of every
// revision since its last one and loads fully when any is missing, so a
// Source whose last load predates rows pruned since loads fully once. An
// instance following the database has loaded within its poll interval of
// every write, far inside any retention of an hour or more, so it keeps
// loading incrementally. The audit of a pruned revision is gone: GET
// /api/v1/audit and the admin page list the entries kept.
func (d *DB) PruneAudit(ctx context.Context, cutoff time.Time) (int64, error) {
	var total int64
	for {
		n, err := d.pruneOnce(ctx, cutoff.UnixMilli())
		total += n
		if err != nil || n < pruneBatch {
			return total, err
		}
	}
}

// pruneOnce deletes up to pruneBatch of the oldest audit rows written
// before cutoff (Unix milliseconds).
func (d *DB) pruneOnce(ctx context.Context, cutoff int64) (int64, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	res, err := d.db.ExecContext(ctx, d.q(`DELETE FROM audit WHERE revision IN
		(SELECT revision FROM audit WHERE at < ? ORDER BY revision LIMIT ?)`), cutoff, pruneBatch)
	if err != nil {
		return 0, fmt.Errorf("rulesdb: prune audit: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("rulesdb: prune audit: %w", err)
	}
	return n, nil
}
