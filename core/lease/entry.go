package lease

import (
	"hash/maphash"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/algo"
)

// entry is what a Store keeps of one key: its block, the store's last
// word on it, its rate here, and a cached denial. Every field is guarded
// by mu.
type entry struct {
	mu   sync.Mutex
	key  core.Key // the Store's own copy
	h    uint64   // key's hash
	next *entry   // the next entry of the same hash in the shard
	lim  core.Limit
	sp   algo.Spec
	seen int64 // the latest local instant this key has seen (µs)
	raw  int64 // the clock's reading at seen (see Store.local)
	last int64 // the local instant of its last op, for the sweeper
	hold int64 // the hold of its blocks (µs): its ops' Lease
	dead bool  // forgotten by the sweeper: find the key's entry again

	blk  block
	deny denial
	// flight is the store call in progress for this key, if any: the ops
	// that need the store meanwhile wait for it (one call, not one each).
	flight *flight

	// The store's last word: its Remaining after the last take, and the
	// take's store and local instants, which map one clock onto the other.
	remaining        int64
	lastAt, lastRecv int64
	known            bool // remaining, lastAt and lastRecv are set
	// Sizing: the units decided since mark (local µs), the rate they make
	// (units per µs, smoothed) and the last block's size.
	mark, used int64
	marked     bool
	rate       float64
	lastN      int64
	// exactUntil: until then (local µs) every op is decided by the store,
	// exactly (the key was found under an override).
	exactUntil int64
}

// block is a block of units taken in one Take: n units admitted at the
// store instant at, sent at the local instant send and answered at recv.
type block struct {
	n, left         int64
	send, recv, end int64 // local µs; the block serves ops before end
	sendRaw         int64 // the clock's reading at send
	at              int64 // the take's Result.At (store µs)
	dl              int64 // buckets: the debt the take left, in units, less one µs
	state           core.State
	capacity        int64
	resetAt         int64 // windows: the local instant the take's ResetAfter names
	winEnd          int64 // windows: the local instant by which the take's window has ended
}

// denial is a denial the store gave for cost, repeated until the local
// instant until.
type denial struct {
	cost, until, recv int64
	res               core.Result
}

// flight is one store call for a key; done is closed when it ends. err is
// the call's error, which the ops that waited for it return too; direct
// tells them to call the store themselves (its answer was a failure
// policy's, which a block cannot be taken from).
type flight struct {
	done   chan struct{}
	err    error
	direct bool
}

// clock returns the local instant for e (its lock held): never before an
// instant e has seen, so a clock stepped back never extends its block.
func (e *entry) clock(t int64) int64 {
	e.seen = max(e.seen, t)
	return e.seen
}

// clockOf is e.clock of the Store's clock; it records the clock's own
// reading in e.raw.
func (s *Store) clockOf(e *entry) int64 {
	acc, raw := s.local()
	e.raw = raw
	return e.clock(acc)
}

// bucket reports whether e's limit is a bucket's.
func (e *entry) bucket() bool { return e.sp.Algorithm.Bucket() }

// usable reports whether e's block can serve cost units at now. A bucket's
// unit is usable only while the bucket would still have had it if every
// unit left were taken at its deadline: while now ≤ TAT − left×T, the TAT
// being the one the take left (the take's local instant plus its debt).
func (e *entry) usable(now, cost int64) bool {
	b := &e.blk
	if b.left < cost || now >= b.end {
		return false
	}
	if !e.bucket() {
		return true
	}
	if e.raw < b.sendRaw {
		// The clock stepped back behind the take: a unit spent now would
		// be spent, on the store's clock, before it was taken.
		return false
	}
	x := b.dl - b.left*e.sp.T
	return x >= 0 && now-b.send <= x/e.sp.Q
}

// serve decides cost units from e's block at now, writing the Result to
// out, if the block can; cost 0 peeks.
func (e *entry) serve(now, cost int64, out *core.Result) bool {
	if !e.usable(now, max(cost, 1)) {
		return false
	}
	b := &e.blk
	b.left -= cost
	*out = core.Result{
		Allowed:    true,
		State:      b.state,
		Previous:   b.state,
		Capacity:   b.capacity,
		Remaining:  b.left,
		ResetAfter: e.resetAfter(now),
		At:         b.at + (now - b.recv),
	}
	return true
}

// resetAfter is the ResetAfter of a decision from e's block at now: for a
// window, the take's, aged (its window's end and the next are fixed
// instants); for a bucket, the longest any of its states needs (another
// instance may have pushed its TAT later since the take).
func (e *entry) resetAfter(now int64) time.Duration {
	if e.bucket() {
		return e.sp.Duration(e.sp.Full)
	}
	return time.Duration(max(e.blk.resetAt-now, 0)) * time.Microsecond
}

// denied repeats e's cached denial for cost at now into out, if it holds.
func (e *entry) denied(now, cost int64, out *core.Result) bool {
	d := &e.deny
	if now >= d.until || cost < d.cost || d.cost == 0 {
		return false
	}
	age := time.Duration(now-d.recv) * time.Microsecond
	*out = d.res
	out.Source = core.FromDenyCache
	out.Previous = core.Throttled
	if out.RetryAfter != core.RetryNever {
		out.RetryAfter = max(out.RetryAfter-age, time.Microsecond)
	}
	out.ResetAfter = max(out.ResetAfter-age, 0)
	e.last = now
	return true
}

// forget drops e's block, its cached denial and what sizing learned:
// its next op is decided by the store exactly.
func (e *entry) forget() {
	e.blk, e.deny = block{}, denial{}
	e.rate, e.lastN, e.used, e.mark, e.marked, e.known, e.exactUntil = 0, 0, 0, 0, false, false, 0
}

// hash is k's hash: its shard and its place in the shard's map.
func (s *Store) hash(k *core.Key) uint64 {
	return maphash.String(s.seed, k.Identity) ^ maphash.String(s.seed, k.Policy)*0x9e3779b97f4a7c15
}

// lookup returns the entry of k, whose hash is h, or nil (sh's lock held).
func (sh *shard) lookup(h uint64, k *core.Key) *entry {
	for e := sh.m[h]; e != nil; e = e.next {
		if e.key == *k {
			return e
		}
	}
	return nil
}

// remove deletes e from sh (sh's write lock held).
func (sh *shard) remove(e *entry) {
	p := sh.m[e.h]
	if p == e {
		if e.next == nil {
			delete(sh.m, e.h)
		} else {
			sh.m[e.h] = e.next
		}
		return
	}
	for ; p != nil && p.next != e; p = p.next {
	}
	if p != nil {
		p.next = e.next
	}
}

// each calls f for every entry of sh (sh's lock held).
func (sh *shard) each(f func(*entry)) {
	for _, e := range sh.m {
		for ; e != nil; e = e.next {
			f(e)
		}
	}
}

// find returns k's entry, or nil.
func (s *Store) find(k core.Key) *entry {
	h := s.hash(&k)
	sh := &s.shards[h%nShards]
	sh.mu.RLock()
	e := sh.lookup(h, &k)
	sh.mu.RUnlock()
	return e
}

// get returns op's entry, creating it (nil when the Store keeps
// WithMaxKeys keys already, or op's limit is invalid: the store below
// then decides, or refuses, the op).
func (s *Store) get(op *core.Op) *entry {
	h := s.hash(&op.Key)
	sh := &s.shards[h%nShards]
	sh.mu.RLock()
	e := sh.lookup(h, &op.Key)
	sh.mu.RUnlock()
	if e != nil {
		return e
	}
	sp, err := compile(op.Limit)
	if err != nil || s.keys.Load() >= int64(s.cfg.maxKeys) {
		return nil
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e = sh.lookup(h, &op.Key); e != nil {
		return e
	}
	k := core.Key{Identity: strings.Clone(op.Key.Identity), Policy: strings.Clone(op.Key.Policy)}
	e = &entry{key: k, h: h, lim: op.Limit, sp: sp, next: sh.m[h]}
	sh.m[h] = e
	s.keys.Add(1)
	return e
}
