package lease

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core"
)

// Defaults of a Store.
const (
	// DefaultShare is the fraction of the shared Remaining one block may
	// take: the last units of a limit are never parked at one instance.
	DefaultShare = 0.25
	// DefaultMaxKeys bounds the keys a Store keeps blocks and rates for
	// (a few hundred bytes each); a key idle for two seconds (or eight
	// holds) is forgotten.
	DefaultMaxKeys = 1 << 16
	// DefaultSweepInterval is how often the sweeper ends the blocks whose
	// hold has passed and forgets idle keys.
	DefaultSweepInterval = 20 * time.Millisecond
)

// Store is the lease layer: a core.Store over another one (the Redis
// store, a guard, the remote store) that decides the ops of leased
// policies (core.Op.Lease positive) in memory, from blocks of units it
// takes from that store, and passes every other call through. Build one
// with New; the zero value is not usable.
//
// A Store is safe for concurrent use. It starts one goroutine, which ends
// the blocks whose hold has passed (giving back their unused units) and
// forgets idle keys; Close stops it and gives back every block's unused
// units (it does not close the store below).
type Store struct {
	inner  core.Store
	cfg    config
	shards [nShards]shard
	seed   maphash.Seed
	epoch  time.Time  // origin of the local instants (the monotonic clock)
	step   *stepClock // the local instants of WithClock's clock, or nil
	keys   atomic.Int64

	refundMu sync.Mutex
	refunds  []core.Admission // unused units to give back, in the sweeper
	wake     chan struct{}
	quit     chan struct{}
	done     chan struct{}
	closed   atomic.Bool
	closeMu  sync.Mutex

	stats counters
}

const nShards = 64

type shard struct {
	mu sync.RWMutex
	m  map[uint64]*entry // by key hash; entries of one hash are chained
	_  [64]byte          // keep the locks of two shards off one cache line
}

type config struct {
	share    float64
	maxKeys  int
	maxBlock int64
	sweep    time.Duration
	clock    func() time.Time
	log      *slog.Logger
}

// Option configures a Store.
type Option func(*config)

// WithShare sets the fraction of the shared Remaining that one block may
// take, in (0, 1] (default DefaultShare). Smaller shares park fewer units
// at one instance when many share a limit; near the limit every block
// shrinks to the request's own cost whatever the share.
func WithShare(f float64) Option { return func(c *config) { c.share = f } }

// WithMaxBlock caps the units of one block (default: the limit's
// capacity).
func WithMaxBlock(n int64) Option { return func(c *config) { c.maxBlock = n } }

// WithMaxKeys bounds the keys the Store keeps blocks for (default
// DefaultMaxKeys): the ops of further keys are decided by the store below,
// exactly, until idle keys are forgotten.
func WithMaxKeys(n int) Option { return func(c *config) { c.maxKeys = n } }

// WithSweepInterval sets how often the sweeper ends the blocks whose hold
// has passed (default DefaultSweepInterval): an idle instance gives its
// unused units back at most this long after their hold.
func WithSweepInterval(d time.Duration) Option { return func(c *config) { c.sweep = d } }

// WithClock replaces the time source of the blocks' holds and deadlines,
// for tests (give the store below the same clock). The Store measures
// time by the clock's steps forward only: a step back is not time going
// back, and the steps forward after it count in full, so a block never
// lasts longer, by this Store's measure, than the time the store below
// has seen pass. The default, the monotonic clock, never steps.
func WithClock(now func() time.Time) Option { return func(c *config) { c.clock = now } }

// WithLogger sets where failed give-backs are logged (default
// slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// New returns a lease layer over inner.
func New(inner core.Store, opts ...Option) (*Store, error) {
	if inner == nil {
		return nil, errors.New("lease: nil store")
	}
	c := config{share: DefaultShare, maxKeys: DefaultMaxKeys, sweep: DefaultSweepInterval}
	custom := false
	for _, o := range opts {
		o(&c)
		custom = custom || c.clock != nil
	}
	if !custom {
		c.clock = time.Now
	}
	switch {
	case !(c.share > 0 && c.share <= 1):
		return nil, fmt.Errorf("lease: WithShare: must be in (0, 1], got %v", c.share)
	case c.maxKeys < 1:
		return nil, fmt.Errorf("lease: WithMaxKeys: must be at least 1, got %d", c.maxKeys)
	case c.maxBlock < 0:
		return nil, fmt.Errorf("lease: WithMaxBlock: must not be negative, got %d", c.maxBlock)
	case c.sweep <= 0:
		return nil, fmt.Errorf("lease: WithSweepInterval: must be positive, got %s", c.sweep)
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	s := &Store{inner: inner, cfg: c, seed: maphash.MakeSeed(), epoch: time.Now(),
		wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	if custom {
		s.step = &stepClock{now: c.clock, last: c.clock()}
	}
	for i := range s.shards {
		s.shards[i].m = make(map[uint64]*entry)
	}
	go s.sweeper()
	return s, nil
}

// local returns the local instant, in µs since the Store was built: of
// the monotonic clock, or the sum of WithClock's clock's steps forward;
// and raw, the clock's own reading (the same for the monotonic clock).
func (s *Store) local() (acc, raw int64) {
	if s.step != nil {
		return s.step.read()
	}
	t := int64(time.Since(s.epoch) / time.Microsecond)
	return t, t
}

// stepClock measures the time of a clock that may step: the sum of its
// steps forward (in ns), so that its steps back take no time away.
type stepClock struct {
	mu   sync.Mutex
	now  func() time.Time
	last time.Time
	sum  time.Duration
}

func (c *stepClock) read() (sum, raw int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.now()
	if d := t.Sub(c.last); d > 0 {
		c.sum += d
	}
	c.last = t
	return int64(c.sum / time.Microsecond), t.UnixMicro()
}

// Close stops the sweeper and gives back the unused units of every block
// (see Refund), waiting for the store below to take them. Every method
// then returns an error wrapping core.ErrClosed. Close is idempotent.
func (s *Store) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed.Swap(true) {
		return nil
	}
	close(s.quit)
	<-s.done
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.each(func(e *entry) {
			e.mu.Lock()
			s.endBlock(e, s.clockOf(e))
			e.mu.Unlock()
		})
		sh.mu.Unlock()
	}
	s.drain()
	return nil
}

// open reports ErrClosed once Close has begun.
func (s *Store) open(method string) error {
	if s.closed.Load() {
		return fmt.Errorf("lease: %s: %w", method, core.ErrClosed)
	}
	return nil
}

// Stats are a Store's counters since New.
type Stats struct {
	// Local counts the ops decided from a block, in memory.
	Local uint64
	// CachedDenials counts the ops denied from a denial the store gave
	// earlier (Result.Source core.FromDenyCache).
	CachedDenials uint64
	// Takes counts the calls of Take on the store below made for leased
	// ops (block takes, and the exact decisions of ops too rare for a
	// block).
	Takes uint64
	// PassedThrough counts the Take calls, and the takes of TakeEach,
	// passed to the store below untouched (ops without a Lease, bookings,
	// sliding window logs).
	PassedThrough uint64
	// GivenBack and GiveBackUnits count the refunds of unused units and
	// the units they named; GiveBackFailures those the store failed.
	GivenBack, GiveBackUnits, GiveBackFailures uint64
	// Dropped counts the units of bucket blocks that ended unused: a
	// bucket's are never given back (see the package documentation).
	Dropped uint64
	// RefundsDropped counts refunds of a leased bucket's admissions,
	// which give back nothing.
	RefundsDropped uint64
	// Keys is the number of keys with a block or a rate kept.
	Keys int64
}

type counters struct {
	local, denied, takes, passed, given, givenUnits, giveFailed, dropped, refundsDropped atomic.Uint64
}

// Stats returns the Store's counters.
func (s *Store) Stats() Stats {
	c := &s.stats
	return Stats{
		Local: c.local.Load(), CachedDenials: c.denied.Load(), Takes: c.takes.Load(), PassedThrough: c.passed.Load(),
		GivenBack: c.given.Load(), GiveBackUnits: c.givenUnits.Load(), GiveBackFailures: c.giveFailed.Load(),
		Dropped: c.dropped.Load(), RefundsDropped: c.refundsDropped.Load(), Keys: s.keys.Load(),
	}
}

// Reset forgets k's state under l in the store below, and this Store's
// block of k (its units are forgotten with the state they were counted
// in). Another instance's block of k is not reset: it decides from its
// units until its hold ends.
func (s *Store) Reset(ctx context.Context, k core.Key, l core.Limit) error {
	if err := s.open("Reset"); err != nil {
		return err
	}
	if e := s.find(k); e != nil {
		e.mu.Lock()
		e.forget()
		e.mu.Unlock()
	}
	return s.inner.Reset(ctx, k, l)
}

// SetOverride ends this Store's block of k, giving its unused units back,
// and sets the override in the store below; k's ops are then decided
// there, under the override, exactly. Another instance's block of k
// decides from its units until its hold ends.
func (s *Store) SetOverride(ctx context.Context, k core.Key, o core.Override) error {
	if err := s.open("SetOverride"); err != nil {
		return err
	}
	s.endBlockOf(k)
	return s.inner.SetOverride(ctx, k, o)
}

// ClearOverride ends this Store's block of k, as SetOverride, and clears
// k's override in the store below.
func (s *Store) ClearOverride(ctx context.Context, k core.Key) error {
	if err := s.open("ClearOverride"); err != nil {
		return err
	}
	s.endBlockOf(k)
	return s.inner.ClearOverride(ctx, k)
}

// endBlockOf ends k's block, giving its unused units back first.
func (s *Store) endBlockOf(k core.Key) {
	e := s.find(k)
	if e == nil {
		return
	}
	e.mu.Lock()
	s.endBlock(e, s.clockOf(e))
	e.forget() // its next op learns, exactly, what now applies
	e.mu.Unlock()
	s.drain()
}
