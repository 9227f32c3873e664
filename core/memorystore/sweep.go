package memorystore

import (
	"runtime"
	"time"
)

// sweepChunk is how many slots the sweeper examines (or, while a table is
// resized, moves) per hold of a shard lock; a deletion counts as
// sweepDeleteCost slots. A hold then lasts a few µs at most.
const (
	sweepChunk      = 256
	sweepDeleteCost = 4
)

// sweeper deletes expired keys incrementally: every interval it makes one
// pass over every shard in turn, in chunks of sweepChunk slots, releasing
// the shard's lock (and yielding) between chunks, so that no decision waits
// for more than one chunk.
func (s *Store) sweeper() {
	defer close(s.done)
	tick := time.NewTicker(s.sweepEvery)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		for i := range s.shards {
			sh := &s.shards[i]
			for {
				select {
				case <-s.stop:
					return
				default:
				}
				if _, done := sh.sweepChunk(s.now(), s.sweepChunk); done {
					break
				}
				runtime.Gosched()
			}
		}
	}
}

// sweepChunk does one bounded step of the sweeper's pass over the shard:
// while the table is being resized, it moves up to n old slots; otherwise it
// examines up to n slots from the cursor, deleting the expired ones (each
// deletion counting as sweepDeleteCost slots). It reports whether the pass
// is over. At the end of a pass it starts shrinking a table that stayed
// sparse for two passes in a row.
func (sh *shard) sweepChunk(now int64, n int) (deleted int, done bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.t.migrating() {
		sh.t.migrate(n)
		return 0, false
	}
	size := len(sh.t.slots)
	if size == 0 {
		return 0, true
	}
	// The pass walks the table backwards: when a key is deleted, the keys
	// of its cluster that follow it have been swept already, so an expired
	// run is deleted without shifting the run itself (forwards, deleting a
	// run of k keys would shift it k times).
	i := sh.sweep % size
	if sh.swept == 0 {
		i = sh.passStart(i)
	}
	for work := 0; work < n && sh.swept < size; {
		sl := &sh.t.slots[i]
		if sl.h != 0 && sl.expire() <= now {
			// The deletion may shift a later (live) key into slot i:
			// look at it again.
			sh.remove(i)
			deleted++
			work += sweepDeleteCost
			continue
		}
		work++
		sh.swept++
		if i--; i < 0 {
			i = size - 1
		}
	}
	sh.sweep = i
	if sh.swept < size {
		return deleted, false
	}
	sh.swept = 0
	sh.shrinkSparse(size)
	return deleted, true
}

// passStart is where a pass from slot i starts: the first empty slot at
// or after it, so that no cluster spans the pass's start and end:
// deletions then only shift keys already seen. sh.mu is held.
func (sh *shard) passStart(i int) int {
	size := len(sh.t.slots)
	for k := 0; k < size && sh.t.slots[i].h != 0; k++ {
		if i++; i == size {
			i = 0
		}
	}
	return i
}

// shrinkSparse, at the end of a pass over a table of size slots, shrinks
// a table that stayed sparse for two passes in a row, even at its fullest
// in between (a table that churn refills between passes would only grow
// again), to half full, never below 256 slots, and by at most 8× at a
// time (its keys move over the following inserts and sweeper chunks at a
// bounded rate). sh.mu is held.
func (sh *shard) shrinkSparse(size int) {
	peak := max(sh.peak, sh.t.n)
	sh.peak = sh.t.n
	if size > 256 && peak*8 < size {
		if sh.sparse++; sh.sparse >= 2 {
			sh.t.resize(max(256, sh.t.n*2, size/8))
			sh.sweep, sh.sparse = 0, 0
		}
	} else {
		sh.sparse = 0
	}
}
