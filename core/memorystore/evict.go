package memorystore

import (
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/algo"
)

const (
	// maxSpecIDs is how many distinct limits get an id (see Store.specID).
	maxSpecIDs = 255
	// evictSample is how many keys eviction compares, found within
	// evictProbes random slots.
	evictSample = 16
	evictProbes = 64
	// maxLogPeek is the longest sliding log whose usage eviction computes;
	// a longer one (a heavily used key) is judged by its warning state.
	maxLogPeek = 64
)

// usage is how far a key is from fresh, as eviction compares keys.
type usage struct {
	throttled bool    // a request of cost 1 would be denied now
	used      float64 // the share of its capacity in use now, 0 to 1
	reset     int64   // µs until the key is fresh
}

// less reports whether u is closer to fresh than v: a key that is not
// throttled before one that is, then the smaller share used, then the
// sooner fresh.
func (u usage) less(v usage) bool {
	switch {
	case u.throttled != v.throttled:
		return v.throttled
	case u.used != v.used:
		return u.used < v.used
	}
	return u.reset < v.reset
}

// evict removes one key to make room for another. Of a sample of keys, it
// takes the one closest to fresh (see usage.less): an expired key at once,
// and a throttled key only if every key of the sample is throttled, after
// looking at every slot of evictProbes. Forgetting that key gives back the
// least to the client it belongs to. It costs a bounded number of peeks and
// allocates nothing.
func (sh *shard) evict(now int64, s *Store) {
	t := &sh.t
	nNew := len(t.slots)
	total := nNew + len(t.old)
	best, seen := -1, 0
	var bu usage
	for range evictProbes {
		if seen >= evictSample && !bu.throttled {
			break
		}
		sh.rng ^= sh.rng << 13
		sh.rng ^= sh.rng >> 7
		sh.rng ^= sh.rng << 17
		i := int(sh.rng % uint64(total))
		sl := sh.slotAt(i)
		if !sl.live() {
			continue
		}
		seen++
		u := sh.usage(sl, now, s)
		if best < 0 || u.less(bu) {
			best, bu = i, u
			if u.reset <= 0 { // fresh already: nothing is lost
				break
			}
		}
	}
	if best < 0 { // a sparse table: the first key from a random slot
		start := int(sh.rng % uint64(total))
		for k := range total {
			i := (start + k) % total
			if sh.slotAt(i).live() {
				best = i
				break
			}
		}
	}
	if best < nNew {
		sh.remove(best)
	} else {
		sh.removeOld(best - nNew)
	}
}

// slotAt returns slot i of the table followed by its old slots.
func (sh *shard) slotAt(i int) *slot {
	if n := len(sh.t.slots); i >= n {
		return &sh.t.old[i-n]
	}
	return &sh.t.slots[i]
}

// usage computes how far the key of sl is from fresh at now: by a peek
// through its limit's step function, or, when its limit is unknown, from
// its stored warning state.
func (sh *shard) usage(sl *slot, now int64, s *Store) usage {
	reset := sl.expire() - now
	if reset <= 0 {
		return usage{}
	}
	sp := s.regSpecs[sl.id()].Load()
	isLog := sl.exp&logFlag != 0
	if sp == nil || (isLog && len(sh.logs[sl.v].At) > maxLogPeek) {
		switch core.State(sl.exp >> stateShift & 3) {
		case core.Throttled:
			return usage{throttled: true, used: 1, reset: reset}
		case core.Warning:
			return usage{used: 0.85, reset: reset}
		}
		return usage{used: 0.5, reset: reset}
	}
	var o algo.Outcome
	if isLog {
		lg := *sh.logs[sl.v] // a peek changes nothing; the copy makes sure
		sp.StepLog(&lg, &o, now, 0)
	} else {
		st := sl.state()
		sp.Step(&st, &o, now, 0)
	}
	return usage{throttled: !o.Allowed, used: 1 - float64(o.Remaining)/float64(sp.Capacity), reset: reset}
}

// specID returns the id of sp's limit, registering it on first use; 0 once
// maxSpecIDs limits have ids. The shard remembers the last one, so a run of
// inserts under one limit costs a pointer comparison.
func (sh *shard) specID(sp *algo.Spec, s *Store) uint8 {
	if sp == sh.lastSpec {
		return sh.lastID
	}
	s.regMu.Lock()
	id, ok := s.regIDs[sp.Limit]
	if !ok && len(s.regIDs) < maxSpecIDs {
		if s.regIDs == nil {
			s.regIDs = map[core.Limit]uint8{}
		}
		id = uint8(len(s.regIDs) + 1)
		s.regIDs[sp.Limit] = id
		c := *sp
		s.regSpecs[id].Store(&c)
	}
	s.regMu.Unlock()
	sh.lastSpec, sh.lastID = sp, id
	return id
}
