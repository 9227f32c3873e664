package memorystore

import (
	"context"
	"fmt"
	"hash/maphash"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/algo"
	"github.com/sluicehq/sluice/core/internal/cacheslot"
	"github.com/sluicehq/sluice/core/storekit"
)

// Store is the in-memory core.Store. The zero value is not usable: call New.
// A Store is safe for concurrent use; Close stops its sweeper.
//
// Take of up to four ops, on keys that exist, allocates nothing.
type Store struct {
	shards   []shard
	mask     uint64
	seed     maphash.Seed
	th       core.Thresholds
	perShard int
	// The time source: wall (WithClock), or, when nil, the monotonic
	// clock since base, which was baseUs µs after the Unix epoch.
	wall       func() time.Time
	base       time.Time
	baseUs     int64
	specs      [specCacheSize]atomic.Pointer[algo.Spec]
	closed     atomic.Bool
	stop       chan struct{}
	done       chan struct{}
	sweepEvery time.Duration
	sweepChunk int
	evictions  atomic.Int64

	// Every limit a key is stored under gets a small id (1 to maxSpecIDs,
	// kept beside the key), through which eviction finds its compiled
	// limit. Ids are never reused; keys of further limits get id 0.
	regMu    sync.Mutex
	regIDs   map[core.Limit]uint8
	regSpecs [maxSpecIDs + 1]atomic.Pointer[algo.Spec]

	ovMu       sync.RWMutex
	overrides  map[core.Key]override
	ovPruneAt  int // len(overrides) at which SetOverride drops the ended ones
	nOverrides atomic.Int64
	ovGen      atomic.Uint64
}

type shard struct {
	shardState
	_ [128 - unsafe.Sizeof(shardState{})%128]byte // own cache lines: no false sharing of locks
}

type shardState struct {
	mu     sync.Mutex
	t      table
	logs   []*algo.Log
	free   []int64
	sweep  int    // sweeper cursor
	swept  int    // slots the sweeper has visited in its current pass
	sparse int    // consecutive passes that found the table sparse
	peak   int    // most keys held since the sweeper's last pass
	rng    uint64 // eviction sampling
	// The id of the last limit a key was inserted under.
	lastSpec *algo.Spec
	lastID   uint8
}

type config struct {
	maxKeys    int
	shards     int
	th         core.Thresholds
	clock      func() time.Time
	sweepEvery time.Duration
}

// Option configures a Store.
type Option func(*config)

// WithMaxKeys bounds the number of live keys (default 1<<20). When a shard
// is full, a key is evicted to make room: of a sample of its keys, one that
// is not throttled if there is any, and of those the one that has used the
// smallest share of its capacity (see the package documentation).
func WithMaxKeys(n int) Option { return func(c *config) { c.maxKeys = n } }

// WithShards sets the number of shards, rounded up to a power of two
// (default 16 per CPU, at least 64).
func WithShards(n int) Option { return func(c *config) { c.shards = n } }

// WithThresholds sets the usage fractions of the warning state (default 0.8
// and 0.7).
func WithThresholds(th core.Thresholds) Option { return func(c *config) { c.th = th } }

// WithSweepInterval sets how often the sweeper visits every shard (default
// one second). Zero disables the sweeper: expired keys are then deleted only
// when touched or evicted.
func WithSweepInterval(d time.Duration) Option { return func(c *config) { c.sweepEvery = d } }

// WithClock replaces the time source, for simulations and tests. The clock
// is read with microsecond precision.
func WithClock(now func() time.Time) Option { return func(c *config) { c.clock = now } }

// New returns a Store; it starts one sweeper goroutine unless disabled.
func New(opts ...Option) (*Store, error) {
	c := config{maxKeys: 1 << 20, shards: max(64, 16*runtime.GOMAXPROCS(0)), sweepEvery: time.Second}
	for _, o := range opts {
		o(&c)
	}
	if err := c.th.Validate(); err != nil {
		return nil, fmt.Errorf("memorystore: %w", err)
	}
	if c.maxKeys < 1 {
		return nil, fmt.Errorf("memorystore: WithMaxKeys: must be at least 1, got %d", c.maxKeys)
	}
	if c.shards < 1 || c.shards > 1<<16 {
		return nil, fmt.Errorf("memorystore: WithShards: must be in [1, 65536], got %d", c.shards)
	}
	if c.sweepEvery < 0 {
		return nil, fmt.Errorf("memorystore: WithSweepInterval: must not be negative, got %s", c.sweepEvery)
	}
	n := 1
	for n < c.shards {
		n <<= 1
	}
	n = min(n, c.maxKeys) // a shard holds at least one key
	for n&(n-1) != 0 {
		n &= n - 1
	}
	s := &Store{
		shards:     make([]shard, n),
		mask:       uint64(n - 1),
		seed:       maphash.MakeSeed(),
		th:         c.th,
		perShard:   (c.maxKeys + n - 1) / n,
		sweepEvery: c.sweepEvery,
		sweepChunk: sweepChunk,
		stop:       make(chan struct{}),
		done:       make(chan struct{}),
	}
	for i := range s.shards {
		s.shards[i].rng = uint64(i)*0x9e3779b97f4a7c15 | 1
	}
	s.wall = c.clock
	if s.wall == nil {
		s.base = time.Now()
		s.baseUs = s.base.UnixMicro()
	}
	if s.sweepEvery > 0 {
		go s.sweeper()
	} else {
		close(s.done)
	}
	return s, nil
}

// Close stops the sweeper. Every method then returns an error wrapping
// core.ErrClosed.
// Close is idempotent.
func (s *Store) Close() error {
	if s.closed.CompareAndSwap(false, true) {
		close(s.stop)
	}
	<-s.done
	return nil
}

// Len returns the number of live keys (expired keys not yet swept count).
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.t.n
		sh.mu.Unlock()
	}
	return n
}

// Evictions returns how many keys were evicted to respect WithMaxKeys.
func (s *Store) Evictions() int64 { return s.evictions.Load() }

// Reset forgets k under l: its next request sees a fresh key.
func (s *Store) Reset(_ context.Context, k core.Key, l core.Limit) error {
	if err := s.open(); err != nil {
		return fmt.Errorf("memorystore: Reset: %w", err)
	}
	var p pending
	if err := s.prepare(&p, &core.Op{Key: k, Limit: l}); err != nil {
		return fmt.Errorf("memorystore: Reset: %w", err)
	}
	p.sh.mu.Lock()
	if i, ok := p.sh.t.find(p.h); ok {
		p.sh.remove(i)
	}
	p.sh.mu.Unlock()
	return nil
}

// open reports ErrClosed once the store is closed.
func (s *Store) open() error {
	if s.closed.Load() {
		return core.ErrClosed
	}
	return nil
}

// prepare checks op (closed store, key, cost, booking bound, limit: an
// error names the field) and sets p to decide it under its own limit: the
// compiled limit, the key's hash, its shard and the bound of a booking.
func (s *Store) prepare(p *pending, op *core.Op) error {
	k, l := &op.Key, &op.Limit
	if s.closed.Load() || k.Identity == "" || op.Cost < 0 || op.MaxDelay < 0 {
		return s.invalid(op)
	}
	// The compiled limit, from a small lock-free cache (see spec).
	sp := s.specs[cacheslot.Of(*l, specCacheSize)].Load()
	if sp == nil || sp.Limit != *l {
		var err error
		if sp, err = s.compile(*l); err != nil {
			return storekit.FieldIn("Limit", err)
		}
	}
	var h uint64 // the key's hash (see hash), inline
	if k.Policy == "" {
		h = maphash.Comparable(s.seed, k.Identity)
	} else {
		h = s.pairHash(k)
	}
	h = mixAlgorithm(h, l.Algorithm)
	p.sp, p.h, p.sh = sp, h, &s.shards[h&s.mask]
	if op.MaxDelay != 0 {
		p.book = int64(op.MaxDelay / time.Microsecond)
	}
	return nil
}

// errNoIdentity is the error of an op or a key without an identity.
var errNoIdentity = &core.FieldError{Field: "Key.Identity", Message: "empty key", Err: core.ErrNoKey}

// invalid is the error prepare returns for a closed store, a key without
// an identity, a negative cost or a negative bound of a booking.
func (s *Store) invalid(op *core.Op) error {
	switch {
	case s.closed.Load():
		return core.ErrClosed
	case op.Key.Identity == "":
		return errNoIdentity
	case op.Cost < 0:
		return &core.FieldError{Field: "Cost", Message: fmt.Sprintf("must not be negative, got %d", op.Cost), Err: core.ErrInvalidCost}
	}
	return storekit.ValidateBooking(op.MaxDelay, 1)
}

// now reads the clock, in µs since the Unix epoch.
func (s *Store) now() int64 {
	if s.wall != nil {
		return s.wallNow()
	}
	// One monotonic clock read: immune to steps of the wall clock.
	return s.baseUs + int64(time.Since(s.base)/time.Microsecond)
}

// wallNow reads the clock given by WithClock.
func (s *Store) wallNow() int64 { return s.wall().UnixMicro() }

// overrideHash is the hash of k's state while override gen applies (see
// hash).
func (s *Store) overrideHash(k *core.Key, a core.Algorithm, gen uint64) uint64 {
	h := s.hash(k, a) ^ gen*0xd6e8feb86659fd93
	if h&^idMask == 0 {
		h |= idMask + 1
	}
	return h
}

// hash is the hash of k under algorithm a: of its two parts as they are
// (maphash.Comparable hashes each string of the Key in turn, as a Go map
// does: nothing is joined or copied), or of the identity alone for a key
// without a policy. Its low bits pick the shard; the table keys on the rest
// (h&^idMask, never 0), as the low byte of a slot holds the id of the key's
// limit. Within a shard the low bits are the same for every key anyway:
// with at least 256 shards nothing of the hash is lost, with the default 64
// two bits.
func (s *Store) hash(k *core.Key, a core.Algorithm) uint64 {
	if k.Policy == "" {
		return mixAlgorithm(maphash.Comparable(s.seed, k.Identity), a)
	}
	return mixAlgorithm(s.pairHash(k), a)
}

// pairHash hashes the identity and the policy of k.
func (s *Store) pairHash(k *core.Key) uint64 { return maphash.Comparable(s.seed, *k) }

// mixAlgorithm mixes algorithm a into the hash h of a key, never leaving
// its hash part (h&^idMask) zero.
func mixAlgorithm(h uint64, a core.Algorithm) uint64 {
	h ^= uint64(a) * 0x9e3779b97f4a7c15
	if h&^idMask == 0 {
		h |= idMask + 1
	}
	return h
}

const specCacheSize = 64

// spec returns the compiled l from a small lock-free cache, compiling (and
// validating) it on a miss.
func (s *Store) spec(l *core.Limit) (*algo.Spec, error) {
	if sp := s.specs[cacheslot.Of(*l, specCacheSize)].Load(); sp != nil && sp.Limit == *l {
		return sp, nil
	}
	return s.compile(*l)
}

// compile compiles l into its slot of the cache.
func (s *Store) compile(l core.Limit) (*algo.Spec, error) {
	sp, err := algo.Compile(l, s.th)
	if err != nil {
		return nil, err
	}
	s.specs[cacheslot.Of(l, specCacheSize)].Store(&sp)
	return &sp, nil
}

// insertLog stores a new log for h; i is where find said h would go.
func (sh *shard) insertLog(sp *algo.Spec, h uint64, i int, lg *algo.Log, exp, now int64, s *Store) {
	var idx int64
	if n := len(sh.free); n > 0 {
		idx, sh.free = sh.free[n-1], sh.free[:n-1]
		sh.logs[idx] = lg
	} else {
		idx = int64(len(sh.logs))
		sh.logs = append(sh.logs, lg)
	}
	i = sh.insert(sp, h, i, now, s)
	sh.t.slots[i].exp = logFlag
	sh.t.slots[i].set(algo.State{Expire: exp, V: idx, State: lg.State})
}

// insert claims a slot for h (not present), stored under sp, evicting or
// growing as needed; i is where find last said h would go. A table being
// resized moves a few more of its old keys.
func (sh *shard) insert(sp *algo.Spec, h uint64, i int, now int64, s *Store) int {
	moved := false
	if sh.t.n >= s.perShard {
		sh.evict(now, s)
		s.evictions.Add(1)
		moved = true
	}
	if sh.t.full() {
		sh.t.grow()
		moved = true
	}
	if sh.t.migrating() {
		sh.t.migrate(sh.t.step)
		moved = true
	}
	if moved || i < 0 {
		// h is in neither table (the caller looked): its place in the new
		// one is all that is needed.
		i, _ = sh.t.probe(h)
	}
	sh.t.slots[i].h = h&^idMask | uint64(sh.specID(sp, s))
	sh.t.n++
	sh.t.ver++
	sh.peak = max(sh.peak, sh.t.n)
	return i
}

// remove deletes slot i, releasing its log if it has one.
func (sh *shard) remove(i int) {
	sh.release(&sh.t.slots[i])
	sh.t.del(i)
}

// removeOld deletes old slot j of a table being resized.
func (sh *shard) removeOld(j int) {
	sh.release(&sh.t.old[j])
	sh.t.delOld(j)
}

// release frees the log of sl, if it has one.
func (sh *shard) release(sl *slot) {
	if sl.exp&logFlag != 0 {
		v := sl.v
		sh.logs[v] = nil
		sh.free = append(sh.free, v)
	}
}

var _ core.Store = (*Store)(nil)
