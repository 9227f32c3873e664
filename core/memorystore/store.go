package memorystore

import (
	"cmp"
	"context"
	"fmt"
	"hash/maphash"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/algo"
	"github.com/sluicehq/sluice/core/internal/cacheslot"
)

// Store is the in-memory core.Store. The zero value is not usable: call New.
// A Store is safe for concurrent use; Close stops its sweeper.
//
// Take with one op, on a key that exists, allocates nothing.
type Store struct {
	shards     []shard
	mask       uint64
	seed       maphash.Seed
	th         core.Thresholds
	perShard   int
	clock      func() int64
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
	if c.clock != nil {
		s.clock = func() int64 { return c.clock().UnixMicro() }
	} else {
		base := time.Now()
		baseUs := base.UnixMicro()
		// One monotonic clock read per decision; immune to wall-clock steps.
		s.clock = func() int64 { return baseUs + int64(time.Since(base)/time.Microsecond) }
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

// Take decides ops all or nothing; see core.Store. The context is not
// consulted: a decision never waits. One op is decided under its shard's
// lock; several under the locks of all their shards, taken together (in
// index order), so the group is atomic.
func (s *Store) Take(_ context.Context, ops []core.Op, out []core.Result) error {
	if len(out) != len(ops) {
		return fmt.Errorf("memorystore: Take: %d results for %d ops", len(out), len(ops))
	}
	switch len(ops) {
	case 0:
		return nil
	case 1:
		return s.take(&ops[0], &out[0])
	}
	if err := core.ValidateGroup(ops); err != nil {
		return fmt.Errorf("memorystore: Take: %w", err)
	}
	return s.takeAll(ops, out)
}

// take decides one op into res: a take, or a booking within op.MaxDelay.
func (s *Store) take(op *core.Op, res *core.Result) error {
	sp, h, err := s.prepare(&op.Key, &op.Limit, op.Cost)
	if err == nil && op.MaxDelay < 0 {
		err = core.ValidateBooking(op.MaxDelay, 1)
	}
	if err != nil {
		return fmt.Errorf("memorystore: Take: op 0: %w", err)
	}
	now := s.clock()
	var applied *core.Limit
	var gen uint64
	book := int64(op.MaxDelay / time.Microsecond)
	ownSp, ownH, until := sp, h, int64(0)
	if ov, ok := s.overridden(op.Key, now); ok {
		if ov.spec == nil {
			*res = blocked(sp, ov.until, now)
			s.handover(res, sp, h, ov.until, now, op.Cost)
			return nil
		}
		sp, until = ov.spec, ov.until
		h = s.overrideHash(&op.Key, sp.Algorithm, ov.gen)
		applied, gen = &sp.Limit, ov.gen
		// A slot is admitted under the limit in force at it: the
		// override's only before it ends.
		book = min(book, ov.until-now-1)
	}
	sh := &s.shards[h&s.mask]
	var o algo.Outcome
	sh.mu.Lock()
	sh.take(sp, &o, h, now, op.Cost, book, s)
	sh.mu.Unlock()
	*res = sp.Result(&o)
	res.Applied, res.Override = applied, gen // the override's limit, which the Result describes
	if applied != nil {
		s.handover(res, ownSp, ownH, until, now, op.Cost)
	}
	return nil
}

// handover gives res, decided at now under an override or a block that
// ends at until, the waits of the key as a whole (algo.Spec.Handover):
// when they depend on it, it peeks the key's own state h (under its own
// limit sp) at until, under that state's shard lock.
func (s *Store) handover(res *core.Result, sp *algo.Spec, h uint64, until, now, cost int64) {
	if retry, reset := algo.HandoverNeeds(res, until-now); !retry && !reset {
		return
	}
	sh := &s.shards[h&s.mask]
	var own algo.Outcome
	sh.mu.Lock()
	sh.ownAt(sp, h, until, cost, &own)
	sh.mu.Unlock()
	sp.Handover(res, until-now, &own)
}

// ownAt writes to own what the state h under sp answers at the instant at
// (see algo.Spec.Handover): Allowed and Retry of a request of cost there,
// Reset of a peek there. It changes nothing. sh.mu is held.
func (sh *shard) ownAt(sp *algo.Spec, h uint64, at, cost int64, own *algo.Outcome) {
	st, lg := sh.load(sp, h)
	sh.decide(sp, own, &st, lg, at, 0)
	if cost > 0 {
		var o algo.Outcome
		sh.decide(sp, &o, &st, lg, at, cost) // on the copies load made
		own.Allowed, own.Retry = o.Allowed, o.Retry
	}
}

// Reset forgets k under l: its next request sees a fresh key.
func (s *Store) Reset(_ context.Context, k core.Key, l core.Limit) error {
	if err := s.open(); err != nil {
		return fmt.Errorf("memorystore: Reset: %w", err)
	}
	_, h, err := s.prepare(&k, &l, 0)
	if err != nil {
		return fmt.Errorf("memorystore: Reset: %w", err)
	}
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	if i, ok := sh.t.find(h); ok {
		sh.remove(i)
	}
	sh.mu.Unlock()
	return nil
}

// open reports ErrClosed once the store is closed.
func (s *Store) open() error {
	if s.closed.Load() {
		return core.ErrClosed
	}
	return nil
}

// prepare checks one op (closed store, key, cost, limit: an error names the
// field) and returns its compiled limit and its key's hash.
func (s *Store) prepare(k *core.Key, l *core.Limit, cost int64) (*algo.Spec, uint64, error) {
	switch {
	case s.closed.Load():
		return nil, 0, core.ErrClosed
	case k.Identity == "":
		return nil, 0, fmt.Errorf("Key.Identity: %w", core.ErrNoKey)
	case cost < 0:
		return nil, 0, fmt.Errorf("Cost: %w: %d", core.ErrInvalidCost, cost)
	}
	sp, err := s.spec(*l)
	if err != nil {
		return nil, 0, fmt.Errorf("Limit: %w", err)
	}
	return sp, s.hash(k, l.Algorithm), nil
}

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
	var h uint64
	if k.Policy == "" {
		h = maphash.String(s.seed, k.Identity)
	} else {
		h = maphash.Comparable(s.seed, *k)
	}
	h ^= uint64(a) * 0x9e3779b97f4a7c15
	if h&^idMask == 0 {
		h |= idMask + 1
	}
	return h
}

const specCacheSize = 64

// spec returns the compiled l from a small lock-free cache, compiling (and
// validating) it on a miss.
func (s *Store) spec(l core.Limit) (*algo.Spec, error) {
	slot := &s.specs[cacheslot.Of(l, specCacheSize)]
	if sp := slot.Load(); sp != nil && sp.Limit == l {
		return sp, nil
	}
	sp, err := algo.Compile(l, s.th)
	if err != nil {
		return nil, err
	}
	slot.Store(&sp)
	return &sp, nil
}

// take decides cost of h at now, as a booking within book µs when book is
// positive (a window, and the log, never book: see algo.Spec.Book).
func (sh *shard) take(sp *algo.Spec, o *algo.Outcome, h uint64, now, cost, book int64, s *Store) {
	i, found := sh.t.find(h)
	if sp.Algorithm == core.SlidingWindowLog {
		sh.takeLog(sp, o, h, i, found, now, cost, s)
		return
	}
	var st algo.State
	if found {
		sl := &sh.t.slots[i]
		st.Expire, st.V, st.State = int64(sl.exp&expMask), sl.v, core.State(sl.exp>>stateShift&3)
	}
	if book > 0 {
		sp.Book(&st, o, now, cost, book)
	} else {
		sp.Step(&st, o, now, cost)
	}
	switch {
	case cost == 0: // a peek changes nothing, not even by forgetting
	case found && st.Expire == 0 && st.V == 0 && st.State == 0:
		sh.remove(i)
	case found:
		sh.t.slots[i].set(st)
	case st.Expire != 0:
		i = sh.insert(sp, h, i, now, s)
		sh.t.slots[i].set(st)
	}
}

func (sh *shard) takeLog(sp *algo.Spec, o *algo.Outcome, h uint64, i int, found bool, now, cost int64, s *Store) {
	var lg *algo.Log
	if found {
		lg = sh.logs[sh.t.slots[i].v]
	} else {
		lg = &algo.Log{}
	}
	sp.StepLog(lg, o, now, cost)
	exp := lg.Expire(sp)
	switch {
	case cost == 0:
	case found && exp == 0:
		sh.remove(i)
	case found:
		sh.t.slots[i].set(algo.State{Expire: exp, V: sh.t.slots[i].v, State: lg.State})
	case exp != 0:
		sh.insertLog(sp, h, i, lg, exp, now, s)
	}
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

// takeAll decides several ops all or nothing under the locks of all their
// shards.
func (s *Store) takeAll(ops []core.Op, out []core.Result) error {
	type pending struct {
		sp      *algo.Spec
		h       uint64
		sh      *shard
		o       algo.Outcome
		st      algo.State
		lg      *algo.Log
		blocked bool
		applied *core.Limit // an override's limit
		gen     uint64      // and its generation
		res     core.Result
		// Under an override or a block: the key's own limit, state and
		// shard, and when the override ends (see handover).
		own   *algo.Spec
		ownH  uint64
		ownSh *shard
		until int64
	}
	ps := make([]pending, len(ops))
	now := s.clock()
	for i, op := range ops {
		sp, h, err := s.prepare(&op.Key, &op.Limit, op.Cost)
		if err != nil {
			return fmt.Errorf("memorystore: Take: op %d: %w", i, err)
		}
		if ov, ok := s.overridden(op.Key, now); ok {
			p := pending{own: sp, ownH: h, ownSh: &s.shards[h&s.mask], until: ov.until}
			if ov.spec == nil {
				p.sp, p.sh, p.blocked, p.res = sp, p.ownSh, true, blocked(sp, ov.until, now)
			} else {
				p.sp, p.h = ov.spec, s.overrideHash(&op.Key, ov.spec.Algorithm, ov.gen)
				p.sh, p.applied, p.gen = &s.shards[p.h&s.mask], &ov.spec.Limit, ov.gen
			}
			ps[i] = p
			continue
		}
		ps[i] = pending{sp: sp, h: h, sh: &s.shards[h&s.mask]}
	}
	locked := make([]*shard, 0, 2*len(ps))
	for i := range ps {
		locked = append(locked, ps[i].sh)
		if ps[i].ownSh != nil {
			locked = append(locked, ps[i].ownSh)
		}
	}
	slices.SortFunc(locked, func(a, b *shard) int { return cmp.Compare(uintptr(unsafe.Pointer(a)), uintptr(unsafe.Pointer(b))) })
	locked = slices.Compact(locked)
	for _, sh := range locked {
		sh.mu.Lock()
	}
	defer func() {
		for _, sh := range locked {
			sh.mu.Unlock()
		}
	}()
	// Decide every op on a copy of its state.
	denied := false
	for i, op := range ops {
		p := &ps[i]
		if p.blocked {
			denied = denied || (op.Cost > 0 && !op.Shadow)
			continue
		}
		p.st, p.lg = p.sh.load(p.sp, p.h)
		p.sh.decide(p.sp, &p.o, &p.st, p.lg, now, op.Cost)
		if !p.o.Allowed && op.Cost > 0 && !op.Shadow {
			denied = true
		}
	}
	for i, op := range ops {
		p := &ps[i]
		switch {
		case p.blocked:
			out[i] = p.res
		case denied && p.o.Allowed && op.Cost > 0:
			// Allowed by its policy, but the request was denied: report the
			// unconsumed state and write nothing.
			st, lg := p.sh.load(p.sp, p.h)
			p.sh.decide(p.sp, &p.o, &st, lg, now, 0)
			p.o.Allowed, p.o.Retry = true, 0
		case op.Cost > 0 && p.o.Retry != -1: // a cost that can never pass changes nothing
			p.sh.commit(p.sp, p.h, p.st, p.lg, now, s)
		}
		if !p.blocked {
			out[i] = p.sp.Result(&p.o)
			out[i].Applied, out[i].Override = p.applied, p.gen
		}
		if p.own == nil {
			continue
		}
		// Under an override or a block: the waits of the key as a whole
		// (the own state's shard is locked with the others).
		left := p.until - now
		if retry, reset := algo.HandoverNeeds(&out[i], left); retry || reset {
			var own algo.Outcome
			p.ownSh.ownAt(p.own, p.ownH, p.until, op.Cost, &own)
			p.own.Handover(&out[i], left, &own)
		}
	}
	return nil
}

// Refund gives back the units of the admission a, or nothing; see
// core.Store. An admission under an override (a.Override: its
// Result.Override) goes back to that override's state while it is in
// force, and gives back nothing once it has ended.
func (s *Store) Refund(_ context.Context, a core.Admission) error {
	sp, h, err := s.prepare(&a.Key, &a.Limit, a.Cost)
	if err != nil {
		return fmt.Errorf("memorystore: Refund: %w", err)
	}
	if a.Cost == 0 {
		return nil
	}
	now := s.clock()
	if a.Override != 0 {
		ov, ok := s.overridden(a.Key, now)
		if !ok || ov.gen != a.Override || ov.spec == nil {
			return nil // that override ended: its state is gone
		}
		// Its state is keyed by its generation, never another's: should
		// it end before the shard is locked, the units go nowhere else.
		sp, h = ov.spec, s.overrideHash(&a.Key, ov.spec.Algorithm, ov.gen)
	}
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, found := sh.t.find(h); !found {
		return nil
	}
	st, lg := sh.load(sp, h)
	if lg != nil {
		sp.RefundLog(lg, now, a.Cost, a.At)
	} else {
		sp.Refund(&st, now, a.Cost, a.At)
	}
	sh.commit(sp, h, st, lg, now, s)
	return nil
}

// load returns a copy of h's state (or of its log) for sp's algorithm.
func (sh *shard) load(sp *algo.Spec, h uint64) (algo.State, *algo.Log) {
	i, found := sh.t.find(h)
	if sp.Algorithm == core.SlidingWindowLog {
		lg := &algo.Log{}
		if found {
			orig := sh.logs[sh.t.slots[i].v]
			lg = &algo.Log{At: slices.Clone(orig.At), N: slices.Clone(orig.N), State: orig.State}
		}
		return algo.State{}, lg
	}
	if !found {
		return algo.State{}, nil
	}
	return sh.t.slots[i].state(), nil
}

// decide runs the step on a loaded state (or log).
func (sh *shard) decide(sp *algo.Spec, o *algo.Outcome, st *algo.State, lg *algo.Log, now, cost int64) {
	if lg != nil {
		sp.StepLog(lg, o, now, cost)
	} else {
		sp.Step(st, o, now, cost)
	}
}

// commit stores a decided state (or log) for h: written, inserted, or
// deleted when fresh.
func (sh *shard) commit(sp *algo.Spec, h uint64, st algo.State, lg *algo.Log, now int64, s *Store) {
	i, found := sh.t.find(h)
	if lg != nil {
		exp := lg.Expire(sp)
		switch {
		case exp == 0 && found:
			sh.remove(i)
		case exp == 0:
		case found:
			*sh.logs[sh.t.slots[i].v] = *lg
			sh.t.slots[i].set(algo.State{Expire: exp, V: sh.t.slots[i].v, State: lg.State})
		default:
			sh.insertLog(sp, h, i, lg, exp, now, s)
		}
		return
	}
	switch {
	case st == (algo.State{}) && found:
		sh.remove(i)
	case st == (algo.State{}):
	case found:
		sh.t.slots[i].set(st)
	default:
		i = sh.insert(sp, h, i, now, s)
		sh.t.slots[i].set(st)
	}
}

var _ core.Store = (*Store)(nil)
