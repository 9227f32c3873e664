package memorystore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"unsafe"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/algo"
	"github.com/sluicehq/sluice/core/storekit"
)

// Take decides ops all or nothing; see core.Store. The context is not
// consulted: a decision never waits. Every Take, of one op or of several,
// is decided the same way (see group): under the locks of every shard its
// ops read (the shard of each state decided on and, for an op under an
// override or a block, the shard of the key's own state), taken together
// in address order, so that it is atomic. One op on its own state is the
// same steps, straight on (see decideOne: a throttled key's is decided on
// a copy of its state taken under the lock).
func (s *Store) Take(_ context.Context, ops []core.Op, out []core.Result) error {
	if len(out) != len(ops) {
		return fmt.Errorf("memorystore: Take: %d results for %d ops", len(out), len(ops))
	}
	switch n := len(ops); {
	case n == 0:
		return nil
	case n > smallGroup:
		return s.take(ops, out, make([]pending, n))
	case n > 1:
		var few [smallGroup]pending
		return s.take(ops, out, few[:n])
	}
	var one [1]pending
	p, op := &one[0], &ops[0]
	now := s.now()
	if err := s.prepare(p, op); err != nil {
		return opError(0, err)
	}
	if s.nOverrides.Load() != 0 {
		if s.override(p, op, now); p.own != nil {
			s.group(ops, out, one[:], now)
			return nil
		}
	}
	p.decideOne(op, now, s)
	p.sp.SetResult(&out[0], &p.o)
	return nil
}

// decideOne decides p's op, alone in its Take and on its own state (not
// under an override or a block: see Take), at now.
// A key whose last decision denied it (a throttled key, the hot key of a
// flood) is most likely denied again, which changes nothing: its state is
// copied under its shard's lock and decided once the lock is released, so
// that other decisions on the shard wait for the copy only. What that
// decision changes, if anything, is written under the lock again if the
// state is still the one decided on, else the op is decided again under
// the lock. Either way the op is decided on the state as it was at an
// instant the lock was held, with the same clock reading: the decision is
// the one deciding under the lock would have made.
func (p *pending) decideOne(op *core.Op, now int64, s *Store) {
	sh := p.sh
	sh.mu.Lock()
	p.i, p.found = sh.t.atHome(p.h)
	if !p.found || p.sp.Algorithm == core.SlidingWindowLog || core.State(sh.t.slots[p.i].exp>>stateShift&3) != core.Throttled {
		p.decideFrom(op, now, true, s)
		sh.mu.Unlock()
		return
	}
	p.ver, p.st = sh.t.ver, sh.t.slots[p.i].state()
	sh.mu.Unlock()
	was := p.st
	if p.book > 0 {
		p.sp.Book(&p.st, &p.o, now, op.Cost, p.book)
	} else {
		p.sp.Step(&p.st, &p.o, now, op.Cost)
	}
	if op.Cost <= 0 || p.o.Retry == -1 || p.st == was {
		return // nothing to store (see keep and slot.update)
	}
	sh.mu.Lock()
	if p.ver == sh.t.ver && sh.t.slots[p.i].state() == was {
		p.keep(op.Cost, now, s)
	} else {
		p.decide(op, now, true, s)
	}
	sh.mu.Unlock()
}

// smallGroup is the most ops a Take decides without allocating.
const smallGroup = 4

// pending is one op of a Take while it is decided: where its state is, and
// what was decided on it.
type pending struct {
	sp *algo.Spec // the limit applied: the op's, or its override's
	h  uint64     // the hash of the state decided on
	sh *shard     // that state's shard
	// book is how far ahead a booking may go, in µs (0: a take).
	book int64
	// The state's slot, as find left it at the table's version ver (see
	// table.ver).
	i     int
	ver   uint32
	found bool
	// The decision: on st, a copy of the stored state, or on lg, the
	// stored log or a copy of it (see read).
	st algo.State
	lg *algo.Log
	o  algo.Outcome
	// Under an override or a block (own is then not nil): the key's own
	// limit, state and shard, when the override ends, and its generation.
	own     *algo.Spec
	ownH    uint64
	ownSh   *shard
	until   int64
	gen     uint64
	blocked bool
}

// take decides ops into out (as Take), ps holding one pending per op.
func (s *Store) take(ops []core.Op, out []core.Result, ps []pending) error {
	if err := storekit.ValidateGroup(ops); err != nil {
		return fmt.Errorf("memorystore: Take: %w", err)
	}
	now := s.now()
	for i := range ps {
		if err := s.prepare(&ps[i], &ops[i]); err != nil {
			return opError(i, err)
		}
		if s.nOverrides.Load() != 0 {
			s.override(&ps[i], &ops[i], now)
		}
	}
	s.group(ops, out, ps, now)
	return nil
}

// group decides the ops of ps at now under the locks of every shard they
// read: all of them, then, knowing whether the Take is denied, each one's
// end (see finish), then the Results.
func (s *Store) group(ops []core.Op, out []core.Result, ps []pending, now int64) {
	var buf [2 * smallGroup]*shard
	locked := lockSet(ps, buf[:0])
	for _, sh := range locked {
		sh.mu.Lock()
	}
	final := len(ps) == 1 // a lone op under an override: nothing else can deny it
	denied := false
	for i := range ps {
		if ps[i].decide(&ops[i], now, final, s) {
			denied = true
		}
	}
	for i := range ps {
		ps[i].finish(&ops[i], &out[i], denied, final, now, s)
	}
	for _, sh := range locked {
		sh.mu.Unlock()
	}
	for i := range ps {
		if p := &ps[i]; p.own == nil {
			p.sp.SetResult(&out[i], &p.o)
		}
	}
}

// opError is the error of Take for op i.
func opError(i int, err error) error {
	return fmt.Errorf("memorystore: Take: %w", storekit.FieldIn(fmt.Sprintf("ops[%d]", i), err))
}

// override sets p, prepared under its op's own limit, to decide under the
// override or block of its key in force at now, if there is one.
func (s *Store) override(p *pending, op *core.Op, now int64) {
	ov, ok := s.overridden(op.Key, now)
	if !ok {
		return
	}
	p.own, p.ownH, p.ownSh, p.until, p.gen = p.sp, p.h, p.sh, ov.until, ov.gen
	if ov.spec == nil {
		p.blocked = true
		return
	}
	p.sp, p.h = ov.spec, s.overrideHash(&op.Key, ov.spec.Algorithm, ov.gen)
	p.sh = &s.shards[p.h&s.mask]
	// A slot is admitted under the limit in force at it: the override's
	// only before it ends.
	p.book = min(p.book, ov.until-now-1)
}

// lockSet returns, appended to buf, the shards the ops of ps read, each
// once, in address order (the order every Take locks them in).
func lockSet(ps []pending, buf []*shard) []*shard {
	for i := range ps {
		buf = append(buf, ps[i].sh)
		if ps[i].own != nil && ps[i].ownSh != ps[i].sh {
			buf = append(buf, ps[i].ownSh)
		}
	}
	slices.SortFunc(buf, func(a, b *shard) int { return cmp.Compare(uintptr(unsafe.Pointer(a)), uintptr(unsafe.Pointer(b))) })
	return slices.Compact(buf)
}

// decide decides p's op at now (its shard is locked) and reports whether it
// denies the Take. When final (the Take is this op alone), nothing can
// deny the Take but the op itself: a log is decided in place, and what is
// decided is stored at once (see keep).
func (p *pending) decide(op *core.Op, now int64, final bool, s *Store) bool {
	if p.blocked {
		return op.Cost > 0 && !op.Shadow
	}
	p.i, p.found = p.sh.t.atHome(p.h)
	return p.decideFrom(op, now, final, s)
}

// decideFrom is decide, not blocked, once atHome has set p.i and p.found.
func (p *pending) decideFrom(op *core.Op, now int64, final bool, s *Store) bool {
	sh := p.sh
	if !p.found {
		p.i, p.found = sh.t.find(p.h)
	}
	p.ver = sh.t.ver
	if p.sp.Algorithm == core.SlidingWindowLog {
		sh.readLog(p, final)
		p.sp.StepLog(p.lg, &p.o, now, op.Cost)
	} else {
		if p.found {
			p.st = sh.t.slots[p.i].state()
		} else {
			p.st = algo.State{}
		}
		if p.book > 0 {
			p.sp.Book(&p.st, &p.o, now, op.Cost, p.book)
		} else {
			p.sp.Step(&p.st, &p.o, now, op.Cost)
		}
	}
	if final {
		p.keep(op.Cost, now, s)
	}
	return !p.o.Allowed && op.Cost > 0 && !op.Shadow
}

// keep stores what p decided (its shard is locked; see commit), unless it
// changes nothing: a peek, or a cost that can never pass.
func (p *pending) keep(cost, now int64, s *Store) {
	if cost > 0 && p.o.Retry != -1 {
		p.sh.commit(p, now, s)
	}
}

// step decides cost units at now on p's loaded state (read): a peek when
// cost is 0.
func (p *pending) step(now, cost int64) {
	if p.lg != nil {
		p.sp.StepLog(p.lg, &p.o, now, cost)
	} else {
		p.sp.Step(&p.st, &p.o, now, cost)
	}
}

// finish completes p's decision in a group (its shards are locked): it
// stores what it decided (see keep; decide did when final), unless the
// Take was denied and p was allowed, which then reports the state as it is
// and changes nothing. An op under an override or a block gets its Result
// here, with the waits of its key as a whole.
func (p *pending) finish(op *core.Op, res *core.Result, denied, final bool, now int64, s *Store) {
	switch {
	case p.blocked || final:
	case denied && p.o.Allowed && op.Cost > 0:
		// Allowed by its own limit, but the request was denied: the
		// unconsumed state, nothing written (a group never books). A peek
		// changes nothing: it may look at a log in place.
		p.sh.refind(p)
		p.sh.read(p, true)
		p.step(now, 0)
		p.o.Allowed, p.o.Retry = true, 0
	default:
		p.keep(op.Cost, now, s)
	}
	if p.own != nil {
		p.handover(res, op.Cost, now)
	}
}

// handover sets res, the Result of p (under an override or a block), with
// the waits of the key as a whole (algo.Spec.Handover): when they depend on
// it, it peeks the key's own state at the override's end, under the lock
// held since the decision.
func (p *pending) handover(res *core.Result, cost, now int64) {
	if p.blocked {
		*res = blocked(p.sp, p.until, now)
	} else {
		*res = p.sp.Result(&p.o)
		res.Applied, res.Override = &p.sp.Limit, p.gen // the override's limit, which the Result describes
	}
	left := p.until - now
	if retry, reset := algo.HandoverNeeds(res, left); retry || reset {
		own := pending{sp: p.own, h: p.ownH, sh: p.ownSh}
		var at algo.Outcome
		own.ownAt(p.until, cost, &at)
		p.own.Handover(res, left, &at)
	}
}

// ownAt writes to own what p's state answers at the instant at (see
// algo.Spec.Handover): Allowed and Retry of a request of cost there, Reset
// of a peek there. It changes nothing; its shard is locked.
func (p *pending) ownAt(at, cost int64, own *algo.Outcome) {
	p.sh.find(p)
	p.sh.read(p, false)
	p.step(at, 0)
	*own = p.o
	if cost > 0 {
		p.step(at, cost) // on the copy read made
		own.Allowed, own.Retry = p.o.Allowed, p.o.Retry
	}
}

// find looks p's state up in its table (sh.mu is held).
func (sh *shard) find(p *pending) {
	p.i, p.found = sh.t.find(p.h)
	p.ver = sh.t.ver
}

// refind looks p's state up again if the table has changed since find.
func (sh *shard) refind(p *pending) {
	if p.ver != sh.t.ver {
		sh.find(p)
	}
}

// read loads p's state, found by find, into p (sh.mu is held): a copy of
// the State, or the log (see readLog). A key not stored reads fresh.
func (sh *shard) read(p *pending, inPlace bool) {
	if p.sp.Algorithm == core.SlidingWindowLog {
		sh.readLog(p, inPlace)
		return
	}
	p.st = algo.State{}
	if p.found {
		p.st = sh.t.slots[p.i].state()
	}
}

// readLog loads p's log: the stored log itself when inPlace (what a
// decision writes is then what is stored, or, for a peek, nothing), else a
// copy of it; a new log for a key not stored.
func (sh *shard) readLog(p *pending, inPlace bool) {
	switch {
	case !p.found:
		p.lg = &algo.Log{}
	case inPlace:
		p.lg = sh.logs[sh.t.slots[p.i].v]
	default:
		orig := sh.logs[sh.t.slots[p.i].v]
		p.lg = &algo.Log{At: slices.Clone(orig.At), N: slices.Clone(orig.N), State: orig.State}
	}
}

// commit stores p's decided state (or log): written, inserted, or deleted
// when fresh. sh.mu is held. A state found in its slot, in a table that has
// not changed since, and not fresh (Expire is zero only for a fresh
// state), the common case, is rewritten there at once, unless it is what
// the slot holds: a throttled key denied again changes nothing, and its
// slot stays clean in the caches of the other CPUs that read it.
func (sh *shard) commit(p *pending, now int64, s *Store) {
	if p.found && p.ver == sh.t.ver && p.lg == nil && p.st.Expire != 0 {
		sh.t.slots[p.i].update(p.st)
		return
	}
	sh.refind(p) // another op of the Take may have changed the table
	i, found := p.i, p.found
	if lg := p.lg; lg != nil {
		exp := lg.Expire(p.sp)
		switch {
		case exp == 0 && found:
			sh.remove(i)
		case exp == 0:
		case found:
			v := sh.t.slots[i].v
			if stored := sh.logs[v]; stored != lg {
				*stored = *lg
			}
			sh.t.slots[i].set(algo.State{Expire: exp, V: v, State: lg.State})
		default:
			sh.insertLog(p.sp, p.h, i, lg, exp, now, s)
		}
		return
	}
	switch st := p.st; {
	case st == (algo.State{}) && found:
		sh.remove(i)
	case st == (algo.State{}):
	case found:
		sh.t.slots[i].set(st)
	default:
		i = sh.insert(p.sp, p.h, i, now, s)
		sh.t.slots[i].set(st)
	}
}

// Refund gives back the units of the admission a, or nothing; see
// core.Store. An admission under an override (a.Override: its
// Result.Override) goes back to that override's state while it is in
// force, and gives back nothing once it has ended.
func (s *Store) Refund(_ context.Context, a core.Admission) error {
	var p pending
	if err := s.prepare(&p, &core.Op{Key: a.Key, Limit: a.Limit, Cost: a.Cost}); err != nil {
		return fmt.Errorf("memorystore: Refund: %w", err)
	}
	if a.Cost == 0 {
		return nil
	}
	now := s.now()
	if a.Override != 0 {
		ov, ok := s.overridden(a.Key, now)
		if !ok || ov.gen != a.Override || ov.spec == nil {
			return nil // that override ended: its state is gone
		}
		// Its state is keyed by its generation, never another's: should
		// it end before the shard is locked, the units go nowhere else.
		p.sp, p.h = ov.spec, s.overrideHash(&a.Key, ov.spec.Algorithm, ov.gen)
		p.sh = &s.shards[p.h&s.mask]
	}
	p.sh.mu.Lock()
	defer p.sh.mu.Unlock()
	if p.sh.find(&p); !p.found {
		return nil
	}
	p.sh.read(&p, true)
	if p.lg != nil {
		p.sp.RefundLog(p.lg, now, a.Cost, a.At)
	} else {
		p.sp.Refund(&p.st, now, a.Cost, a.At)
	}
	p.sh.commit(&p, now, s)
	return nil
}
