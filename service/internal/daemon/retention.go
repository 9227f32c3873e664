package daemon

import (
	"context"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/service/rulesdb"
)

// MinAuditRetention is the shortest --audit-retention: far longer than any
// instance following the database goes between two loads, so that a
// prune never takes the audit rows a following instance's next
// incremental load reads.
const MinAuditRetention = time.Hour

// auditPruneEvery is how often the audit is pruned under
// --audit-retention (and once at start).
const auditPruneEvery = 10 * time.Minute

// pruneAudit deletes, at once and then every auditPruneEvery until ctx
// ends, the audit rows of src's database older than retention. Before the
// database is reached (an instance started from its rules cache) there is
// nothing to prune yet. A failure is logged and tried again at the next
// tick; every instance of a fleet prunes, and a row already gone is no
// error.
func pruneAudit(ctx context.Context, src *rulesdb.Source, retention time.Duration, now func() time.Time, log *slog.Logger) {
	t := time.NewTicker(auditPruneEvery)
	defer t.Stop()
	for {
		if db := src.DB(); db != nil {
			cutoff := now().Add(-retention)
			n, err := db.PruneAudit(ctx, cutoff)
			switch {
			case err != nil && ctx.Err() == nil:
				log.Warn("audit not pruned", "retention", retention, "pruned", n, "error", err)
			case n > 0:
				log.Info("audit pruned", "retention", retention, "before", cutoff.UTC(), "pruned", n)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
