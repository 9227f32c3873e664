package rulesdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/service/rules"
)

// DefaultPollInterval is how often a Source checks the revision by default.
const DefaultPollInterval = 500 * time.Millisecond

// Source is the rules.Source of a database: Load builds a validated
// snapshot of its enabled rules and user tiers whose revision is the
// database revision; Watch polls the revision and loads a new snapshot when
// it moves. It is safe for concurrent use.
type Source struct {
	db   *DB
	poll time.Duration

	mu     sync.Mutex
	loaded int64 // revision of the last snapshot Load returned
	seen   bool
}

var _ rules.Source = (*Source)(nil)

// Source returns the rules.Source of d, polling every poll (0 means
// DefaultPollInterval; a negative interval is an error of Watch).
func (d *DB) Source(poll time.Duration) *Source {
	if poll == 0 {
		poll = DefaultPollInterval
	}
	return &Source{db: d, poll: poll}
}

// Load returns the snapshot of the database's current revision.
func (s *Source) Load(ctx context.Context) (*rules.Snapshot, error) {
	snap, rev, err := s.load(ctx)
	if err == nil {
		s.mu.Lock()
		s.loaded, s.seen = rev, true
		s.mu.Unlock()
	}
	return snap, err
}

func (s *Source) load(ctx context.Context) (*rules.Snapshot, int64, error) {
	// A read-only transaction is a deferred one: one consistent view (WAL)
	// that takes no write lock, so it never waits on a writer.
	// On PostgreSQL, repeatable read gives the same: every query of the
	// load sees one snapshot, and readers never wait on writers.
	opts := &sql.TxOptions{ReadOnly: true}
	if s.db.pg {
		opts.Isolation = sql.LevelRepeatableRead
	}
	tx, err := s.db.db.BeginTx(ctx, opts)
	if err != nil {
		return nil, 0, fmt.Errorf("rulesdb: load: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	var rev int64
	if err := tx.QueryRowContext(ctx, `SELECT value FROM revision WHERE id = 1`).Scan(&rev); err != nil {
		return nil, 0, fmt.Errorf("rulesdb: load: revision: %w", err)
	}
	all, err := loadRules(ctx, tx)
	if err != nil {
		return nil, rev, err
	}
	tiers, err := loadTiers(ctx, tx)
	if err != nil {
		return nil, rev, err
	}
	snap, err := snapshot(rev, all, tiers)
	if err != nil {
		return nil, rev, fmt.Errorf("rulesdb: revision %d: %w", rev, err)
	}
	return snap, rev, nil
}

// Watch polls the revision every poll interval until ctx ends (then it
// returns nil) and calls apply with the snapshot of each new revision. An
// invalid rule set or a database error is reported to onError (once until
// it changes) and the last good snapshot stays in force. The first poll
// compares against the revision of the last snapshot Load returned (or, if
// Load was never called, the revision the database has when Watch starts).
func (s *Source) Watch(ctx context.Context, apply func(*rules.Snapshot), onError func(error)) error {
	if s.poll < 0 {
		return fmt.Errorf("rulesdb: poll interval: must be positive, got %s", s.poll)
	}
	s.mu.Lock()
	last, seen := s.loaded, s.seen
	s.mu.Unlock()
	if !seen {
		rev, err := s.db.Revision(ctx)
		if err != nil {
			rev = -1
		}
		last = rev
	}
	t := time.NewTicker(s.poll)
	defer t.Stop()
	lastErr := ""
	report := func(err error) {
		if err.Error() != lastErr {
			lastErr = err.Error()
			onError(err)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		rev, err := s.db.Revision(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			report(err)
			continue
		}
		if rev == last {
			continue
		}
		snap, rev, err := s.load(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			report(err)
			if errors.Is(err, ErrInvalid) {
				last = rev // an invalid set: do not reload it until the revision moves
			}
			continue
		}
		lastErr = ""
		last = rev
		apply(snap)
	}
}
