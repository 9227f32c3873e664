package rulesdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/service/rules"
)

// DefaultPollInterval is how often a Source checks the revision by default.
const DefaultPollInterval = 500 * time.Millisecond

// CachedSuffix marks the revision of a snapshot read from the disk cache
// (WithCache) while the database could not be reached: "42 (cached)".
const CachedSuffix = " (cached)"

// Source is the rules.Source of a database: Load builds a validated
// snapshot of its enabled rules, user tiers and overrides in force, whose
// revision is the database revision; Watch follows the revision and loads
// a new snapshot when it moves. On PostgreSQL Watch listens on the channel
// NotifyChannel on a connection of its own (every write notifies its revision:
// the hint), still polls the revision every poll interval (the safety net)
// and reloads fully after the listener reconnects; on SQLite it polls.
// With WithCache the last good snapshot is kept on disk, and served while
// the database cannot be reached. A load after a good one is incremental:
// it reads only the rows written since and the audit log's removals, and
// loads fully when those cannot account for every revision (and every
// DefaultFullReloadEvery loads or DefaultFullReloadAfter). It is safe for
// concurrent use.
type Source struct {
	poll    time.Duration
	o       sourceOptions
	dsn     string // OpenSource: what Watch (re)connects to
	pg      bool   // the database is PostgreSQL: Watch listens
	timeout time.Duration
	now     func() time.Time

	mu        sync.Mutex
	db        *DB
	loaded    int64 // revision of the last snapshot Load returned
	seen      bool
	fromCache bool      // that snapshot came from the cache
	cachedAt  time.Time // when the cache in use was written
	// base is the state of the last good load from the database: what the
	// next load patches (nil: it loads fully).
	base   *state
	deltas int       // incremental loads since the last full one
	fullAt time.Time // when the last full load was
	loads  loadCounts

	// What is in force, for Sync (see sync.go).
	sync syncState
	// The PostgreSQL listener's health (see pglisten.go).
	listener ListenerState
}

// loadCounts counts a Source's good loads from the database by kind.
type loadCounts struct{ full, incremental int }

var _ rules.Source = (*Source)(nil)

// SourceOption configures a Source.
type SourceOption func(*sourceOptions)

type sourceOptions struct {
	cache     string
	log       *slog.Logger
	fullEvery int           // at most this many loads in a row are incremental
	fullAfter time.Duration // and a full load is at most this old
	db        []Option      // OpenSource's: what it opens the database with
}

// WithCache keeps the last good snapshot's rows (revision, rules, tiers,
// overrides) as JSON in the file path, rewritten atomically (a temporary
// file, fsync, rename; mode 0600) after each good load. When the database
// cannot be reached, Load serves the cached snapshot, its revision marked
// with CachedSuffix.
func WithCache(path string) SourceOption { return func(o *sourceOptions) { o.cache = path } }

// WithLogger sets the logger of the Source's own events (the cache used or
// not written, the listener reconnecting, overrides left out). The default
// discards them; errors that matter are also passed to Watch's onError.
func WithLogger(l *slog.Logger) SourceOption { return func(o *sourceOptions) { o.log = l } }

// WithDBOptions sets the options OpenSource opens its database with (and
// opens it again with, when it was not reached at first): its timeout
// (WithTimeout) also bounds each of Watch's queries and its listener's
// probes. A Source of DB.Source takes its DB's.
func WithDBOptions(opts ...Option) SourceOption {
	return func(o *sourceOptions) { o.db = append(o.db, opts...) }
}

// Source returns the rules.Source of d, polling every poll (0 means
// DefaultPollInterval; a negative interval is an error of Watch).
func (d *DB) Source(poll time.Duration, opts ...SourceOption) *Source {
	s := newSource(poll, opts)
	s.db, s.pg, s.timeout = d, d.pg, d.timeout
	return s
}

func newSource(poll time.Duration, opts []SourceOption) *Source {
	if poll == 0 {
		poll = DefaultPollInterval
	}
	s := &Source{poll: poll, now: time.Now}
	s.o.fullEvery, s.o.fullAfter = DefaultFullReloadEvery, DefaultFullReloadAfter
	for _, o := range opts {
		o(&s.o)
	}
	if s.o.log == nil {
		s.o.log = slog.New(slog.DiscardHandler)
	}
	dbo := options{timeout: DefaultTimeout}
	for _, o := range s.o.db {
		o(&dbo)
	}
	s.timeout = dbo.timeout
	s.sync.changed = make(chan struct{})
	s.sync.wake = make(chan struct{}, 1)
	return s
}

// OpenSource opens the database at dsn (as Open) and returns its Source.
// When the database cannot be reached and WithCache names a readable cache,
// it returns a Source that serves the cached snapshot (Load succeeds from
// the cache) while Watch keeps trying to connect, with backoff; once
// connected Watch migrates, reloads fully and follows the database. DB
// returns nil until then. With no usable cache an unreachable database is
// an error. The caller closes the database (DB().Close()) after Watch ends.
func OpenSource(ctx context.Context, dsn string, poll time.Duration, opts ...SourceOption) (*Source, error) {
	s := newSource(poll, opts)
	s.dsn, s.pg = dsn, IsPostgres(dsn)
	if s.timeout <= 0 {
		return nil, fmt.Errorf("rulesdb: timeout: must be positive, got %s", s.timeout)
	}
	d, err := Open(ctx, dsn, s.o.db...)
	if err == nil {
		s.db = d
		return s, nil
	}
	if errors.Is(err, ErrSchemaTooNew) || s.o.cache == "" {
		return nil, err
	}
	if _, _, cerr := readCache(s.o.cache); cerr != nil {
		return nil, errors.Join(err, cerr)
	}
	s.o.log.Warn("rules database unreachable: serving the cached rules until it is back", "db", Redact(dsn), "cache", s.o.cache, "error", err)
	return s, nil
}

// DB returns the Source's database, or nil while OpenSource has not
// connected yet.
func (s *Source) DB() *DB {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.db
}

// Load returns the snapshot of the database's current revision, or, with
// WithCache when the database cannot be reached, the cached one.
func (s *Source) Load(ctx context.Context) (*rules.Snapshot, error) {
	var dbErr error
	if db := s.DB(); db != nil {
		snap, st, err := s.loadDB(ctx, db, false)
		if err == nil {
			s.mark(st.Revision, false)
			s.save(st)
			return snap, nil
		}
		if errors.Is(err, ErrInvalid) || s.o.cache == "" {
			return nil, err
		}
		dbErr = err
	} else if s.o.cache == "" {
		return nil, errors.New("rulesdb: load: not connected")
	}
	snap, st, written, err := s.loadCache()
	if err != nil {
		return nil, errors.Join(dbErr, err)
	}
	s.mark(st.Revision, true)
	s.mu.Lock()
	s.cachedAt = written
	s.mu.Unlock()
	return snap, nil
}

func (s *Source) mark(rev int64, fromCache bool) {
	s.mu.Lock()
	s.loaded, s.seen, s.fromCache = rev, true, fromCache
	if fromCache {
		s.base = nil // the next load from the database is full
	}
	if !s.sync.watching {
		// The caller builds its rules from what Load returns; once Watch
		// runs, it alone says what is in force (apply's answer).
		s.sync.applied = rev
	}
	s.mu.Unlock()
}

// CachedAt reports when the cache was written whose snapshot Load last
// returned; ok is false when that snapshot came from the database (or none
// was loaded). A service shows it as the age of the rules in force while
// it serves from the cache.
func (s *Source) CachedAt() (at time.Time, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cachedAt, s.fromCache
}

// state is what one load reads: the rows of one revision, as the cache
// keeps them.
type state struct {
	Revision  int64            `json:"revision"`
	Rules     []*Rule          `json:"rules"`
	Tiers     []TierAssignment `json:"tiers"`
	Overrides []Override       `json:"overrides"`
}

// snapshot builds the state's validated snapshot under revision.
func (s *Source) snapshot(st *state, revision string) (*rules.Snapshot, error) {
	tiers := map[string]map[string]string{}
	for _, t := range st.Tiers {
		if tiers[t.Dimension] == nil {
			tiers[t.Dimension] = map[string]string{}
		}
		tiers[t.Dimension][t.Identifier] = t.Tier
	}
	snap, skipped, err := snapshotAt(revision, st.Rules, tiers, st.Overrides, s.now())
	for _, e := range skipped {
		s.o.log.Warn("rules: override left out", "revision", revision, "error", e)
	}
	if err != nil {
		return nil, fmt.Errorf("rulesdb: revision %s: %w", revision, err)
	}
	return snap, nil
}

// loadDB reads the state of db's current revision in one read-only
// transaction and builds its snapshot: incrementally, patching the state
// of the last good load with the rows written since (see delta.go), or
// fully when full is set or the changes since cannot be accounted for. On
// error the returned state still carries the revision when it was read.
func (s *Source) loadDB(ctx context.Context, db *DB, full bool) (*rules.Snapshot, *state, error) {
	now := s.now()
	s.mu.Lock()
	base := s.base
	if full || s.deltas+1 >= s.o.fullEvery || now.Sub(s.fullAt) >= s.o.fullAfter {
		base = nil
	}
	s.mu.Unlock()
	// A read-only transaction is a deferred one on SQLite: one consistent
	// view (WAL) that takes no write lock, so it never waits on a writer.
	// On PostgreSQL, repeatable read gives the same: every query of the
	// load sees one snapshot, and readers never wait on writers.
	opts := &sql.TxOptions{ReadOnly: true}
	if db.pg {
		opts.Isolation = sql.LevelRepeatableRead
	}
	st := &state{}
	ctx, cancel := db.bound(ctx)
	defer cancel()
	tx, err := db.db.BeginTx(ctx, opts)
	if err != nil {
		return nil, st, fmt.Errorf("rulesdb: load: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := tx.QueryRowContext(ctx, `SELECT value FROM revision WHERE id = 1`).Scan(&st.Revision); err != nil {
		return nil, st, fmt.Errorf("rulesdb: load: revision: %w", err)
	}
	delta := false
	if base != nil {
		if delta, err = readDelta(ctx, tx, db, base, st, now); err != nil {
			return nil, st, err
		}
	}
	if !delta {
		if err := readFull(ctx, tx, db, st, now); err != nil {
			return nil, st, err
		}
	}
	_ = tx.Rollback() // read: release the snapshot before building
	snap, err := s.snapshot(st, strconv.FormatInt(st.Revision, 10))
	if err != nil {
		return nil, st, err
	}
	s.mu.Lock()
	s.base = st
	if delta {
		s.deltas++
		s.loads.incremental++
	} else {
		s.deltas, s.fullAt = 0, now
		s.loads.full++
	}
	s.mu.Unlock()
	return snap, st, nil
}

// save writes st to the cache, if there is one; a failure is logged (the
// service goes on without a fresh cache).
func (s *Source) save(st *state) {
	if s.o.cache == "" {
		return
	}
	if err := writeCache(s.o.cache, st, s.now()); err != nil {
		s.o.log.Error("rules cache not written", "cache", s.o.cache, "error", err)
	}
}

// loadCache reads the cache and builds its snapshot, revision marked.
func (s *Source) loadCache() (*rules.Snapshot, *state, time.Time, error) {
	st, written, err := readCache(s.o.cache)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	snap, err := s.snapshot(st, strconv.FormatInt(st.Revision, 10)+CachedSuffix)
	if err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("rulesdb: cache %s: %w", s.o.cache, err)
	}
	s.o.log.Warn("rules served from the cache", "cache", s.o.cache, "revision", st.Revision, "written_at", written)
	return snap, st, written, nil
}

// openTimeout bounds Watch's opening of OpenSource's database (a
// connection and the migrations) when it was not reached at first.
const openTimeout = 10 * time.Second

// connect opens s.dsn (OpenSource's database) within a bound, and makes it
// the Source's database.
func (s *Source) connect(ctx context.Context) (*DB, error) {
	if s.dsn == "" {
		return nil, errors.New("rulesdb: no database")
	}
	cctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	d, err := Open(cctx, s.dsn, s.o.db...)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.db = d
	s.mu.Unlock()
	return d, nil
}

// backoff is a doubling delay between min and max.
type backoff struct {
	min, max, cur time.Duration
}

func (b *backoff) next() time.Duration {
	switch {
	case b.cur == 0:
		b.cur = b.min
	case b.cur < b.max:
		b.cur = min(2*b.cur, b.max)
	}
	return b.cur
}

func (b *backoff) reset() { b.cur = 0 }

// sleep waits d or until ctx ends; it reports whether ctx is still alive.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// onLiveConn runs op, and runs it again at once (up to maxOpenPG more
// times) while it fails for any reason but invalid rules or the end of ctx.
// A call that fails on a dead pooled connection (the server restarted, or
// the connection was terminated) drops that connection, so after such an
// event the next tries reach a live one within microseconds, where waiting
// for the next poll would spend one poll interval per dead connection.
func onLiveConn(ctx context.Context, op func() error) error {
	var err error
	for range maxOpenPG + 1 {
		if err = op(); err == nil || errors.Is(err, ErrInvalid) || ctx.Err() != nil {
			return err
		}
	}
	return err
}
