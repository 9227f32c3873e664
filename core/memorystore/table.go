package memorystore

import (
	"math/bits"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/algo"
)

// slot is one key of a shard: its hash, whose low byte is replaced by the
// id of the limit the key was stored under (0: unknown; h == 0 marks an
// empty slot), its expiry in µs with the warning state in the top bits, and
// the algorithm's value (for the sliding log, the index of its Log).
type slot struct {
	h   uint64
	exp uint64
	v   int64
}

const (
	stateShift = 61
	expMask    = 1<<stateShift - 1
	logFlag    = 1 << 63 // the slot's v is the index of a sliding-window log

	// idMask is the part of a slot's h that holds its limit's id; the
	// rest is the key's hash, never 0 (see Store.hash).
	idMask = 0xff
	// tomb marks a slot of a table being migrated whose key has gone (its
	// hash part is 0: it matches no key, and probes go on past it).
	tomb = uint64(idMask)
)

// id returns the id of the slot's limit.
func (s *slot) id() uint8 { return uint8(s.h) }

// live reports whether the slot holds a key.
func (s *slot) live() bool { return s.h&^idMask != 0 }

func (s *slot) state() algo.State {
	return algo.State{Expire: int64(s.exp & expMask), V: s.v, State: core.State(s.exp >> stateShift & 3)}
}

func (s *slot) set(st algo.State) {
	s.exp = s.exp&logFlag | uint64(st.Expire)&expMask | uint64(st.State)<<stateShift
	s.v = st.V
}

// update sets the slot's state to st unless it holds it already, so that
// its cache line is written only when it changes.
func (s *slot) update(st algo.State) {
	if exp := s.exp&logFlag | uint64(st.Expire)&expMask | uint64(st.State)<<stateShift; exp != s.exp || st.V != s.v {
		s.exp, s.v = exp, st.V
	}
}

func (s *slot) expire() int64 { return int64(s.exp & expMask) }

// table is a linear-probing hash table with backward-shift deletion (no
// tombstones), keyed by the hash part of h (h&^idMask). Its capacity need
// not be a power of two: a hash's home slot is its high bits scaled to the
// length.
//
// Growing or shrinking never rehashes the whole table at once: resize
// allocates the new slots and keeps the old ones, which are moved over in
// order, a few at a time (migrate), by every insert and by the sweeper.
// Until then a key may still be in old: find moves it over when it looks it
// up. Old slots are never shifted: a key that leaves them before the cursor
// reaches it leaves a tomb.
type table struct {
	slots []slot
	n     int // keys in slots and old together

	old   []slot
	moved int // old[:moved] has been migrated
	step  int // old slots to migrate per insert

	rehashed int // old slots visited by migrations, ever (for tests)

	// ver changes whenever a key may have changed slots (an insert, a
	// deletion, a move), so an index find returned stays valid while ver
	// is what it was then.
	ver uint32
}

func home(h uint64, n int) int {
	i, _ := bits.Mul64(h&^idMask, uint64(n))
	return int(i)
}

func (t *table) home(h uint64) int { return home(h, len(t.slots)) }

// find returns the index of the key of hash h (its id byte ignored) in
// slots, or of the empty slot where it would go. A key found in the old
// slots of a migration is moved into slots first.
func (t *table) find(h uint64) (int, bool) {
	if i, ok := t.atHome(h); ok {
		return i, true
	}
	if len(t.slots) == 0 {
		return -1, false
	}
	i, ok := t.probe(h)
	if ok || t.old == nil {
		return i, ok
	}
	if j, ok := t.probeOld(h); ok {
		t.slots[i] = t.old[j]
		t.old[j].h = tomb
		t.ver++
		return i, true
	}
	return i, false
}

// atHome reports whether the key of hash h is in its home slot (most keys
// are), and returns that slot: a lookup that find completes otherwise.
func (t *table) atHome(h uint64) (int, bool) {
	if n := len(t.slots); n != 0 {
		i := home(h, n)
		return i, t.slots[i].h&^idMask == h&^idMask
	}
	return 0, false
}

func (t *table) probe(h uint64) (int, bool) {
	k := h &^ idMask
	i := t.home(k)
	for {
		x := t.slots[i].h
		if x&^idMask == k {
			return i, true
		}
		if x == 0 {
			return i, false
		}
		if i++; i == len(t.slots) {
			i = 0
		}
	}
}

// probeOld looks h up among the old slots not migrated yet.
func (t *table) probeOld(h uint64) (int, bool) {
	k, n := h&^idMask, len(t.old)
	i := home(k, n)
	for {
		x := t.old[i].h
		if x&^idMask == k {
			// Below the cursor every key has moved (its old slot keeps
			// its hash, so that probes go on past it).
			return i, i >= t.moved
		}
		if x == 0 {
			return -1, false
		}
		if i++; i == n {
			i = 0
		}
	}
}

// full reports whether one more key would pass the 7/8 load factor.
func (t *table) full() bool { return (t.n+1)*8 > len(t.slots)*7 }

// resize starts moving every key into a table of n slots (n leaves room for
// them all); the keys still in the previous table are moved first, at once.
// The move is spread over the following inserts (migrate), fast enough to
// end long before the new table is full.
func (t *table) resize(n int) {
	t.finish()
	t.ver++
	if t.n == 0 {
		t.slots = make([]slot, n)
		return
	}
	t.old, t.moved = t.slots, 0
	t.slots = make([]slot, n)
	// Finish within the room left, with a margin; a growing table within
	// the first 1/32 of it, as until then inserting a new key costs a
	// second probe, in old (with 1/8, inserting 1M keys took 18% longer
	// than rehashing at once; with 1/32, 6%). A growing table has room for
	// 7/16 of its old size at least: at most 76 slots per insert, moved in
	// order (about a µs). A shrinking one (see sweepChunk) has room for
	// 1/22 of it at least: at most 25.
	room := max(n*7/8-t.n, 1)
	f := 1
	if n > len(t.old) {
		f = 32
	}
	t.step = (f*len(t.old)+room-1)/room + 2
}

// migrate moves up to k old slots into slots; it reports whether the
// migration is over.
func (t *table) migrate(k int) bool {
	if t.old == nil {
		return true
	}
	end := min(t.moved+k, len(t.old))
	t.rehashed += end - t.moved
	t.ver++
	for j := t.moved; j < end; j++ {
		if t.old[j].live() {
			i, _ := t.probe(t.old[j].h)
			t.slots[i] = t.old[j]
		}
	}
	if t.moved = end; end == len(t.old) {
		t.old, t.moved, t.step = nil, 0, 0
		return true
	}
	return false
}

// finish completes a migration in progress.
func (t *table) finish() { t.migrate(len(t.old)) }

// migrating reports whether old slots remain to be moved.
func (t *table) migrating() bool { return t.old != nil }

// grow makes room for one more key.
func (t *table) grow() {
	n := len(t.slots)
	switch {
	case n == 0:
		n = 8
	case n < 4096:
		n *= 2
	default:
		n += n / 2
	}
	t.resize(n)
}

// del empties slot i and shifts back the keys that probed past it.
func (t *table) del(i int) {
	n := len(t.slots)
	for j := i; ; {
		if j++; j == n {
			j = 0
		}
		h := t.slots[j].h
		if h == 0 {
			break
		}
		// The key at j may move to i unless its home lies in (i, j].
		k := t.home(h)
		if (i <= j && (k <= i || k > j)) || (i > j && k <= i && k > j) {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = slot{}
	t.n--
	t.ver++
}

// delOld forgets the key at old slot j.
func (t *table) delOld(j int) {
	t.old[j].h = tomb
	t.n--
	t.ver++
}
