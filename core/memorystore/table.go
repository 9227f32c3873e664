package memorystore

import (
	"math/bits"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/algo"
)

// slot is one key of a shard: its hash (0 marks an empty slot), its expiry
// in µs with the warning state in the top bits, and the algorithm's value
// (for the sliding log, the index of its Log).
type slot struct {
	h   uint64
	exp uint64
	v   int64
}

const (
	levelShift = 61
	expMask    = 1<<levelShift - 1
	logFlag    = 1 << 63 // the slot's v is the index of a sliding-window log
)

func (s *slot) state() algo.State {
	return algo.State{Expire: int64(s.exp & expMask), V: s.v, Level: core.State(s.exp >> levelShift & 3)}
}

func (s *slot) set(st algo.State) {
	s.exp = s.exp&logFlag | uint64(st.Expire)&expMask | uint64(st.Level)<<levelShift
	s.v = st.V
}

func (s *slot) expire() int64 { return int64(s.exp & expMask) }

// table is a linear-probing hash table with backward-shift deletion (no
// tombstones). Its capacity need not be a power of two: a hash's home slot is
// its high bits scaled to the length.
type table struct {
	slots []slot
	n     int
}

func (t *table) home(h uint64) int {
	i, _ := bits.Mul64(h, uint64(len(t.slots)))
	return int(i)
}

// find returns the index of h, or of the empty slot where h would go.
func (t *table) find(h uint64) (int, bool) {
	if len(t.slots) == 0 {
		return -1, false
	}
	i := t.home(h)
	for {
		switch t.slots[i].h {
		case h:
			return i, true
		case 0:
			return i, false
		}
		if i++; i == len(t.slots) {
			i = 0
		}
	}
}

// full reports whether one more key would pass the 7/8 load factor.
func (t *table) full() bool { return (t.n+1)*8 > len(t.slots)*7 }

// resize rehashes every key into a table of n slots.
func (t *table) resize(n int) {
	old := t.slots
	t.slots = make([]slot, n)
	for i := range old {
		if old[i].h != 0 {
			j, _ := t.find(old[i].h)
			t.slots[j] = old[i]
		}
	}
}

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
}
