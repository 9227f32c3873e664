package lease

import (
	"context"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/core"
)

// Take decides ops all or nothing (see core.Store.Take). An op of a leased
// policy (Op.Lease positive, no MaxDelay, any algorithm but the sliding
// window log) is decided from this Store's block of its key when the block
// can serve it, and otherwise by one call of the store below that takes a
// new block (see the package documentation); every other op, and every
// call without a leased op, is passed to the store below as it is.
func (s *Store) Take(ctx context.Context, ops []core.Op, out []core.Result) error {
	if err := s.open("Take"); err != nil {
		return err
	}
	if len(out) != len(ops) {
		return fmt.Errorf("lease: Take: %d results for %d ops", len(out), len(ops))
	}
	switch {
	case len(ops) == 1 && leased(&ops[0]):
		return s.takeOne(ctx, &ops[0], &out[0])
	case len(ops) > 1 && anyLeased(ops):
		return s.takeGroup(ctx, ops, out)
	}
	s.stats.passed.Add(1)
	return s.inner.Take(ctx, ops, out)
}

// leased reports whether op is decided from blocks: a leased policy's op,
// valid as far as this Store can tell (the store below names what is
// wrong with the others), that is not a booking (a booking is decided
// exactly, at its slot) and not of a sliding window log (which counts
// each admission at its own instant, see core.ValidateLease).
func leased(op *core.Op) bool {
	return op.Lease > 0 && op.MaxDelay == 0 && op.Cost >= 0 && op.Key.Identity != "" &&
		op.Limit.Algorithm != core.SlidingWindowLog
}

func anyLeased(ops []core.Op) bool {
	for i := range ops {
		if leased(&ops[i]) {
			return true
		}
	}
	return false
}

// takeOne decides one leased op.
func (s *Store) takeOne(ctx context.Context, op *core.Op, out *core.Result) error {
	e := s.get(op)
	if e == nil {
		return s.passOne(ctx, op, out)
	}
	e.mu.Lock()
	for {
		if e.dead { // forgotten by the sweeper meanwhile
			e.mu.Unlock()
			return s.takeOne(ctx, op, out)
		}
		now := s.clockOf(e)
		e.last = now
		if e.lim != op.Limit {
			s.relimit(e, op.Limit, now)
		}
		e.used += op.Cost
		if e.serve(now, op.Cost, out) {
			e.mu.Unlock()
			s.stats.local.Add(1)
			return nil
		}
		if e.denied(now, max(op.Cost, 1), out) {
			e.mu.Unlock()
			s.stats.denied.Add(1)
			return nil
		}
		f := e.flight
		if f == nil {
			if op.Cost == 0 || now < e.exactUntil { // a peek takes no block
				e.mu.Unlock()
				return s.passOne(ctx, op, out)
			}
			return s.refresh(ctx, e, op, now, out)
		}
		e.used -= op.Cost // counted again once the flight has landed
		e.mu.Unlock()
		if err := wait(ctx, f); err != nil {
			return err
		}
		if f.direct {
			return s.passOne(ctx, op, out)
		}
		e.mu.Lock()
	}
}

// wait waits for f to land, and returns its error.
func wait(ctx context.Context, f *flight) error {
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		return fmt.Errorf("lease: Take: %w", ctx.Err())
	}
}

// ops1 is the memory of a Take of one op, pooled: an op passed to a Store
// escapes.
var ops1 = sync.Pool{New: func() any { return new([1]core.Op) }}

// call takes cost units of op's key in the store below, writing its
// Result to out.
func (s *Store) call(ctx context.Context, op *core.Op, cost int64, out *core.Result) error {
	p := ops1.Get().(*[1]core.Op)
	p[0] = *op
	p[0].Cost, p[0].Lease = cost, 0
	err := s.inner.Take(ctx, p[:], unsafe.Slice(out, 1))
	p[0] = core.Op{} // keeps no identity
	ops1.Put(p)
	return err
}

// passOne decides op in the store below, exactly.
func (s *Store) passOne(ctx context.Context, op *core.Op, out *core.Result) error {
	s.stats.passed.Add(1)
	return s.call(ctx, op, op.Cost, out)
}

// relimit moves e to limit l (a policy changed): its block, counted under
// the old limit, ends (its unused units given back), and sizing starts
// again. An invalid l sends the key's ops to the store below, which
// refuses them, until a valid limit comes.
func (s *Store) relimit(e *entry, l core.Limit, now int64) {
	s.endBlock(e, now)
	e.forget()
	e.lim = l
	if sp, err := compile(l); err == nil {
		e.sp = sp
	} else {
		e.exactUntil = maxInstant
	}
}

// refresh takes a new block for op from the store below (e's lock held;
// it is released before the call and on return) and decides op from it.
// Ops of e that arrive meanwhile wait for the call instead of making
// their own.
func (s *Store) refresh(ctx context.Context, e *entry, op *core.Op, now int64, out *core.Result) error {
	hold := int64(op.Lease / time.Microsecond)
	e.hold = max(hold, 1)
	e.noteRate(now)
	n := s.size(e, now, op.Cost, e.hold)
	s.endBlock(e, now)
	f := &flight{done: make(chan struct{})}
	e.flight = f
	seen := e.seen
	e.mu.Unlock()
	send, sendRaw, n, err := s.takeBlock(ctx, op, n, seen, out)
	e.mu.Lock()
	recv := s.clockOf(e)
	e.flight = nil
	if err == nil {
		s.settle(e, op, n, send, recv, out, f)
		e.blk.sendRaw = sendRaw
	}
	f.err = err
	e.mu.Unlock()
	close(f.done)
	return err
}

// takeBlock takes n units for op (n ≥ op.Cost), and, when the store
// refuses n but op's own cost may pass, or answers with a failure
// policy's Result (no block of the shared store), asks again for less:
// the Result of the call kept is in out. It returns the local instant
// that call was sent at (and the clock's reading then) and the units it
// asked for.
func (s *Store) takeBlock(ctx context.Context, op *core.Op, n, seen int64, out *core.Result) (send, sendRaw, asked int64, err error) {
	send, sendRaw = s.local()
	send = max(send, seen)
	s.stats.takes.Add(1)
	if err := s.call(ctx, op, n, out); err != nil || n == op.Cost || out.Allowed && !out.Source.Degraded() {
		return send, sendRaw, n, err
	}
	n2 := op.Cost
	if !out.Allowed && !out.Source.Degraded() && out.Remaining >= op.Cost {
		n2 = max(op.Cost, min(n-1, int64(s.cfg.share*float64(out.Remaining))))
	}
	send2, raw2 := s.local()
	send, sendRaw = max(send, send2), raw2
	s.stats.takes.Add(1)
	err = s.call(ctx, op, n2, out)
	return send, sendRaw, n2, err
}
