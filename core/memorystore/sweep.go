package memorystore

import "time"

// sweeper deletes expired keys incrementally: every interval it visits each
// shard in turn, holding its lock for at most sweepChunk slots.
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
			select {
			case <-s.stop:
				return
			default:
			}
			s.shards[i].sweepChunk(s.clock(), s.sweepChunk)
		}
	}
}

// sweepChunk examines up to n slots from the shard's cursor, deleting the
// expired ones, and shrinks a table that has become sparse.
func (sh *shard) sweepChunk(now int64, n int) (deleted int) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	size := len(sh.t.slots)
	if size == 0 {
		return 0
	}
	i := sh.sweep % size
	for k := 0; k < n && k < size; k++ {
		// A deletion may shift another key into slot i: look at it again.
		for sh.t.slots[i].h != 0 && sh.t.slots[i].expire() <= now {
			sh.remove(i)
			deleted++
		}
		if i++; i == size {
			i = 0
		}
	}
	sh.sweep = i
	// Shrink a table that stayed sparse for two sweeps in a row, to half
	// full and never below 256 slots, so that keys coming back after
	// expiring do not make it regrow from scratch.
	if size > 256 && sh.t.n*8 < size {
		if sh.sparse++; sh.sparse >= 2 {
			sh.t.resize(max(256, sh.t.n*2))
			sh.sweep, sh.sparse = 0, 0
		}
	} else {
		sh.sparse = 0
	}
	return deleted
}
