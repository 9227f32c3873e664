package lease

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/core"
)

// idleAfter is how long a key with no block is kept after its last op
// (at least; longer for long holds): long enough to remember its rate
// between bursts, short enough to bound the memory of a churning
// population.
const idleAfter = int64(2 * time.Second / time.Microsecond)

// queue schedules the refund of unused units a, which the sweeper makes
// at once (off the decision's path).
func (s *Store) queue(a core.Admission) {
	s.refundMu.Lock()
	s.refunds = append(s.refunds, a)
	s.refundMu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// drain gives back every queued refund.
func (s *Store) drain() {
	s.refundMu.Lock()
	rs := s.refunds
	s.refunds = nil
	s.refundMu.Unlock()
	for _, a := range rs {
		if err := s.inner.Refund(context.Background(), a); err != nil {
			s.stats.giveFailed.Add(1)
			s.cfg.log.Warn("lease: giving back unused units failed", "policy", a.Key.Policy, "units", a.Cost, "err", err)
			continue
		}
		s.stats.given.Add(1)
		s.stats.givenUnits.Add(uint64(a.Cost))
	}
}

// sweeper makes the queued refunds as they come, and every sweep interval
// ends the blocks whose hold has passed and forgets idle keys.
func (s *Store) sweeper() {
	defer close(s.done)
	tick := time.NewTicker(s.cfg.sweep)
	defer tick.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-s.wake:
		case <-tick.C:
			s.sweep()
		}
		s.drain()
	}
}

// sweep visits every key once.
func (s *Store) sweep() {
	for i := range s.shards {
		sh := &s.shards[i]
		var idle []*entry
		sh.mu.RLock()
		sh.each(func(e *entry) {
			if s.sweepEntry(e) {
				idle = append(idle, e)
			}
		})
		sh.mu.RUnlock()
		if len(idle) == 0 {
			continue
		}
		sh.mu.Lock()
		for _, e := range idle {
			e.mu.Lock()
			if e.idle(s.clockOf(e)) {
				e.dead = true
				sh.remove(e)
				s.keys.Add(-1)
			}
			e.mu.Unlock()
		}
		sh.mu.Unlock()
	}
}

// sweepEntry ends e's block if its hold has passed, and reports whether e
// is idle.
func (s *Store) sweepEntry(e *entry) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := s.clockOf(e)
	if e.blk.n > 0 && now >= e.blk.end {
		s.endBlock(e, now)
	}
	return e.idle(now)
}

// idle reports whether e holds nothing and has seen no op for a while.
func (e *entry) idle(now int64) bool {
	return e.flight == nil && e.blk.left == 0 && now-e.last > max(idleAfter, 8*e.hold)
}
