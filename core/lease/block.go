package lease

import (
	"math"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/algo"
)

// degradedPause is how long (µs) a key's ops go straight to the store
// below after a failure policy answered its take, before a block is tried
// again.
const degradedPause = 10_000

// maxInstant is a local instant no clock reaches.
const maxInstant = int64(math.MaxInt64)

func compile(l core.Limit) (algo.Spec, error) { return algo.Compile(l, core.Thresholds{}) }

// settle records what the store answered to a take of n units for op,
// sent at send and answered at recv (local µs), in e (its lock held), and
// shapes out, which holds the store's Result, into op's: an admission of
// n > op.Cost starts a block whose first op.Cost units are op's.
func (s *Store) settle(e *entry, op *core.Op, n, send, recv int64, out *core.Result, f *flight) {
	res := out
	skew := int64(0)
	if e.known {
		// The store's clock has moved less than this Store's since the
		// last take (it stepped back): its debts and windows' ends read
		// that much longer here. Take it off the block.
		skew = max(e.lastAt+(send-e.lastRecv)-res.At, 0)
	}
	switch {
	case res.Source.Degraded():
		// A failure policy answered: no unit of the shared store is held,
		// and the key's ops go to it, one each, for a while.
		f.direct = true
		e.exactUntil = recv + min(e.hold, degradedPause)
		return
	case res.Applied != nil:
		// An override applies: its state is decided exactly, by the store,
		// for a hold; units taken beyond op's go back to it at once.
		e.exactUntil = recv + e.hold
		if res.Allowed && n > op.Cost && res.Override != 0 {
			s.queue(core.Admission{Key: e.key, Limit: *res.Applied, Cost: n - op.Cost, At: res.At, Override: res.Override})
		}
		return
	}
	e.known, e.remaining, e.lastAt, e.lastRecv = true, res.Remaining, res.At, recv
	if !res.Allowed {
		if n == op.Cost && res.RetryAfter > 0 {
			wait := min(res.RetryAfter, time.Duration(e.hold)*time.Microsecond)
			e.deny = denial{cost: op.Cost, until: send + int64(wait/time.Microsecond), recv: recv, res: *res}
		}
		return
	}
	e.deny = denial{}
	e.lastN = n
	if n == op.Cost {
		return // an exact decision: no block
	}
	e.blk = s.newBlock(e, op, n, send-skew, recv, res)
	if res.Remaining == 0 && !e.bucket() {
		// The shared state has nothing left: others are starved while
		// this instance holds units. Give them back.
		s.endBlock(e, recv)
	}
	out.Remaining = e.blk.left
}

// newBlock is the block of a take of n units for op admitted with res.
func (s *Store) newBlock(e *entry, op *core.Op, n, send, recv int64, res *core.Result) block {
	b := block{n: n, left: n - op.Cost, send: send, recv: recv, at: res.At, state: res.State, capacity: res.Capacity}
	b.end = send + e.hold
	ra := int64(res.ResetAfter / time.Microsecond)
	if e.bucket() {
		// The take's debt d satisfies ResetAfter = ⌈d/Q⌉ µs: d > (ra-1)×Q.
		b.dl = (ra - 1) * e.sp.Q
		return b
	}
	// The window's end on the store's clock, reached no sooner on the
	// local one than the take's send instant plus what was left of it.
	p := e.sp.Period
	b.winEnd = send + ((res.At/p+1)*p - res.At)
	b.end = min(b.end, b.winEnd)
	b.resetAt = recv + ra
	return b
}

// endBlock ends e's block at now (e's lock held): a window's unused units
// are given back while its window lasts; a bucket's are dropped (giving
// them back would lower the bucket under every block taken after this
// one, which other instances may be spending: see the package
// documentation).
func (s *Store) endBlock(e *entry, now int64) {
	b := &e.blk
	switch {
	case b.left <= 0:
	case e.bucket():
		s.stats.dropped.Add(uint64(b.left))
	case now < b.winEnd:
		s.queue(core.Admission{Key: e.key, Limit: e.lim, Cost: b.left, At: b.at})
	}
	*b = block{}
}

// noteRate folds the units decided for e since its last store call into
// its rate (e's lock held), at a store call made at now.
func (e *entry) noteRate(now int64) {
	if e.marked && now >= e.mark {
		inst := float64(e.used) / float64(max(now-e.mark, 1)) // ops of one µs: a µs
		if e.rate == 0 {
			e.rate = inst
		} else {
			e.rate = (e.rate + inst) / 2
		}
	}
	e.marked, e.mark, e.used = true, now, 0
}

// size is the block to take for an op of cost c at now, held at most
// hold µs: what e's rate spends in that time (or until its window ends),
// at most twice the last block (and c more), at most share of what the
// store has left, at most the capacity and WithMaxBlock, at least c.
func (s *Store) size(e *entry, now, c, hold int64) int64 {
	span := hold
	storeNow := e.lastAt + (now - e.lastRecv)
	if e.known && !e.bucket() {
		p := e.sp.Period
		span = min(span, (storeNow/p+1)*p-storeNow)
	}
	want := e.rate * float64(span)
	n := min(int64(min(want, float64(e.sp.Capacity))), 2*e.lastN+c)
	if e.known {
		n = min(n, int64(s.cfg.share*float64(e.remainingAt(storeNow, now))))
	}
	n = min(n, e.sp.Capacity)
	if s.cfg.maxBlock > 0 {
		n = min(n, s.cfg.maxBlock)
	}
	return max(n, c)
}

// remainingAt estimates what the store has left at local now (store
// instant storeNow): its last Remaining, for a window in the same window
// (a fresh window's capacity otherwise), for a bucket plus what refilled
// since.
func (e *entry) remainingAt(storeNow, now int64) int64 {
	sp := &e.sp
	if !e.bucket() {
		if storeNow/sp.Period == e.lastAt/sp.Period {
			return e.remaining
		}
		return sp.Capacity
	}
	el := now - e.lastRecv
	if el >= sp.Full/sp.Q+1 {
		return sp.Capacity
	}
	return min(sp.Capacity, e.remaining+el*sp.Q/sp.T)
}
