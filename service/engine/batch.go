package engine

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/rules"
)

// CheckBatch decides many checks in one call, under one snapshot of the
// rules, each with its own Result or error (results[i] and errs[i] answer
// cs[i]; errs[i] nil means results[i] holds the answer).
//
// Without allOrNothing each check is decided on its own, exactly as Check
// decides it (idempotency keys included), and the checks of one caller
// (one dimension and identifier: every counter a check can reach is one of
// its caller's) are decided one after the other in request order, so that
// a later check of a counter never sees less of it spent than an earlier
// one. With WithBatchParallelism, the checks of distinct callers are
// decided at once (one round trip to Redis for a batch of distinct
// callers).
//
// With allOrNothing the batch is one decision: every check's rules are
// decided in one all-or-nothing store call, so either every check is
// admitted and counted, or none counts anything, and every Result's
// Allowed is the batch's (a check no rule applies to follows the batch
// too). A check of cost 0 takes nothing and refuses nothing (its Remaining
// says what is left). Two checks counted by one rule and identifier take
// their summed cost from one counter. A check a Deny rule (not a shadow) matches denies
// the batch: no check takes anything (the others' counters are peeked).
// Idempotency keys do not apply to such a batch. If any check is invalid,
// nothing is decided: the invalid ones get their errors and the others an
// error wrapping ErrInvalid that names all_or_nothing. A store failure is
// every check's error.
func (e *Engine) CheckBatch(ctx context.Context, cs []Check, allOrNothing bool) ([]Result, []error) {
	results, errs := make([]Result, len(cs)), make([]error, len(cs))
	// The Results are kept: their Decisions' results need memory of their
	// own, not the pooled arena of CheckBatchFunc.
	mem := &arena{buf: make([]core.PolicyResult, 0, len(cs))}
	e.checkBatch(ctx, cs, allOrNothing, mem, func(i int, r *Result, err error) {
		if err != nil {
			errs[i] = err
			return
		}
		results[i] = *r
	})
	return results, errs
}

// CheckBatchFunc decides cs as CheckBatch does, and hands each check's
// answer to answer instead of returning them all: answer(i, r, nil) with
// the Result of cs[i], or answer(i, nil, err) with its error, once for
// each check, on the calling goroutine, in no particular order (one
// caller's checks are still decided in request order), before
// CheckBatchFunc returns. r, its Decision included, is valid only during
// that call of answer: its memory is reused for the next answer and the
// next batch, so answer writes what its protocol needs (a front door's
// response messages) and keeps nothing of r. It is CheckBatch without the
// memory of the answers: the decisions' results, the rounds and the
// answers reuse pooled memory.
func (e *Engine) CheckBatchFunc(ctx context.Context, cs []Check, allOrNothing bool, answer func(i int, r *Result, err error)) {
	mem, _ := e.arenas.Get().(*arena)
	if mem == nil {
		mem = new(arena)
	}
	mem.reset(len(cs))
	e.checkBatch(ctx, cs, allOrNothing, mem, answer)
	mem.release()
	e.arenas.Put(mem)
}

// answerFunc receives the answer of check i of a batch: its Result (valid
// during the call only) or its error.
type answerFunc = func(i int, r *Result, err error)

// checkBatch decides cs, the checks' results in mem's memory (when it has
// room), and hands each answer to answer (see CheckBatchFunc).
func (e *Engine) checkBatch(ctx context.Context, cs []Check, allOrNothing bool, mem *arena, answer answerFunc) {
	sc, _ := e.batches.Get().(*batchScratch)
	if sc == nil {
		sc = new(batchScratch)
	}
	st := e.cur.Load()
	if allOrNothing {
		e.checkAll(ctx, st, cs, mem, sc, answer)
	} else {
		e.checkEach(ctx, st, cs, mem, sc, answer)
	}
	sc.release()
	e.batches.Put(sc)
}

// batchScratch is the memory of one batch's decision that no answer
// keeps, reused across its rounds and, pooled, across batches: the Result
// handed to each answer, and the arrays of the rounds and of an
// all-or-nothing batch's plan.
type batchScratch struct {
	r       Result
	last    map[caller]int // byCaller's
	heads   []int
	next    []int
	idem    []int
	rcs     []roundCheck
	groups  []core.Group
	ops     []core.GroupOp
	apart   []core.Decision
	errs    []error // of an all-or-nothing batch's invalid checks
	plan    batchPlan
	matches matches // the last check's rules
}

// release clears what sc holds of the batch (identities, results), keeping
// its arrays.
func (sc *batchScratch) release() {
	sc.r = Result{}
	clear(sc.last)
	clear(sc.rcs[:cap(sc.rcs)])
	clear(sc.groups[:cap(sc.groups)])
	clear(sc.ops[:cap(sc.ops)])
	clear(sc.apart)
	clear(sc.errs)
	sc.errs = sc.errs[:0]
	sc.plan.release()
	sc.matches.reset()
}

// answer tells the observers of the decision d of cs[i] (or of its error
// err) and hands it to answer, as a Result in r's memory. d is pooled
// memory (&r.Decision, or the batch's): the observers see it in place.
func (e *Engine) answer(ctx context.Context, cs []Check, i int, d *core.Decision, err error, start time.Time, r *Result, answer answerFunc) {
	c := &cs[i]
	e.observeKept(ctx, kindOf(c), c, d, start, err)
	if err != nil {
		answer(i, nil, err)
		return
	}
	r.set(d)
	answer(i, r, nil)
}

// batchPlan is an all-or-nothing batch's one decision: the ops of every
// counter its checks reach, and which of them (or of the Deny rules'
// results) answers each check.
type batchPlan struct {
	ops     []core.GroupOp
	memb    []int               // cs[i] is decided by ops[memb[k]] (denied[-1-memb[k]] if negative), bound[i] <= k < bound[i+1]
	bound   []int               // into memb
	index   map[groupKey]int    // ops by rule and identifier, for large batches
	indexed bool                // index holds every op (kept across batches, cleared)
	denied  []core.PolicyResult // of Deny rules
	denies  bool                // a Deny rule (not a shadow) denies the batch
}

// release clears what p holds of its batch, keeping its arrays.
func (p *batchPlan) release() {
	clear(p.ops)
	clear(p.index)
	clear(p.denied)
	p.ops, p.memb, p.bound, p.denied, p.denies, p.indexed = p.ops[:0], p.memb[:0], p.bound[:0], p.denied[:0], false, false
}

// checkAll decides cs all or nothing and hands each check its answer (see
// CheckBatch).
func (e *Engine) checkAll(ctx context.Context, st *state, cs []Check, mem *arena, sc *batchScratch, answer answerFunc) {
	start := time.Now()
	p := &sc.plan
	bad := e.planAll(st, cs, p, sc)
	if bad {
		for i := range cs {
			err := sc.errOf(i)
			if err == nil {
				err = invalid("all_or_nothing", "not decided: another check of the batch is invalid")
			}
			e.answer(ctx, cs, i, nil, err, start, &sc.r, answer)
		}
		return
	}
	d := core.Decision{Allowed: true}
	if len(p.ops) > 0 {
		var err error
		if d, err = st.decide(ctx, p.ops, core.GroupCall{}); err != nil {
			err = fmt.Errorf("engine: batch: %w", err)
			for i := range cs {
				e.answer(ctx, cs, i, nil, err, start, &sc.r, answer)
			}
			return
		}
		// The store's all or nothing is over the takes: a peek that finds
		// its counter spent refuses nothing, and the batch was counted.
		d.Allowed = !groupRefused(p.ops, d.Results)
	}
	if p.denies {
		d.Allowed = false
	}
	prs := mem.take(len(p.memb)) // every check's results, one array
	if prs == nil {
		prs = make([]core.PolicyResult, 0, len(p.memb))
	}
	for _, j := range p.memb {
		if j < 0 {
			prs = append(prs, p.denied[-1-j])
		} else {
			prs = append(prs, d.Results[j])
		}
	}
	di := &sc.r.Decision
	for i := range cs {
		*di = core.Decision{Allowed: d.Allowed}
		if lo, hi := p.bound[i], p.bound[i+1]; hi > lo {
			di.Results = prs[lo:hi:hi]
			di.Binding = binding(di.Results)
		}
		e.answer(ctx, cs, i, di, nil, start, &sc.r, answer)
	}
}

// errOf is the error planAll gave cs[i], if any.
func (sc *batchScratch) errOf(i int) error {
	if i < len(sc.errs) {
		return sc.errs[i]
	}
	return nil
}

// planAll matches every check of cs once and makes p the batch's plan: two
// checks counted by one rule and identifier sum their costs in one op, and
// a Deny rule that denies makes every op a peek. bad: some check is
// invalid (its error is sc.errOf's).
func (e *Engine) planAll(st *state, cs []Check, p *batchPlan, sc *batchScratch) (bad bool) {
	p.ops, p.memb, p.bound = slices.Grow(p.ops[:0], len(cs)), slices.Grow(p.memb[:0], len(cs)), slices.Grow(p.bound[:0], len(cs)+1)[:len(cs)+1]
	var now time.Time
	var rbuf [opsBuf]*rules.Rule // each check's matches
	for i := range cs {
		p.bound[i] = len(p.memb)
		c := &cs[i]
		r, err := e.validate(st, c)
		if err != nil {
			if !bad {
				sc.errs = slices.Grow(sc.errs[:0], len(cs))[:len(cs)]
			}
			sc.errs[i], bad = err, true
			continue
		}
		matched := rbuf[:0]
		if r != nil {
			matched = append(matched, r)
		} else {
			matched = sc.matches.match(st.snap, c.Dimension, c.Endpoint)
		}
		for _, m := range matched {
			switch {
			case m.Unlimited:
			case m.Deny: // no counter: denied now
				if now.IsZero() {
					now = e.cfg.now()
				}
				p.memb = append(p.memb, -1-len(p.denied))
				p.denied = append(p.denied, denial(m, now))
				p.denies = p.denies || !m.Shadow
			default:
				p.memb = append(p.memb, p.addCheck(st, m, c))
			}
		}
	}
	p.bound[len(cs)] = len(p.memb)
	if p.denies { // all or nothing: the others only peek
		for j := range p.ops {
			p.ops[j].Cost = 0
		}
	}
	return bad
}

// addCheck adds c's cost to the op of rule m's counter of c's identifier
// (a new op if it has none yet) and returns the op's index.
func (p *batchPlan) addCheck(st *state, m *rules.Rule, c *Check) int {
	if j := p.findOp(m.ID, c.Identifier); j >= 0 {
		p.ops[j].Cost = addCost(p.ops[j].Cost, c.Cost)
		return j
	}
	j := len(p.ops)
	op := core.GroupOp{Policy: m.ID, Identity: c.Identifier, Cost: c.Cost}
	if len(m.Tiers) > 0 {
		op.Tier = st.snap.TierOf(c.Dimension, c.Identifier)
	}
	p.ops = append(p.ops, op)
	if p.indexed {
		p.index[groupKey{m.ID, c.Identifier}] = j
	}
	return j
}

// checkEach decides each of cs on its own and hands each its answer: in
// order on the caller's goroutine, or, with parallelism, in rounds (see
// checkRounds).
func (e *Engine) checkEach(ctx context.Context, st *state, cs []Check, mem *arena, sc *batchScratch, answer answerFunc) {
	if workers := min(e.cfg.parallel, len(cs)); workers > 1 && st.lim != nil {
		e.checkRounds(ctx, st, cs, mem, sc, answer, workers)
		return
	}
	// In order: the store calls one context detached from ctx (as each
	// would be).
	dctx, d := context.WithoutCancel(ctx), &sc.r.Decision
	for i := range cs {
		start := time.Now()
		err := e.check(dctx, st, &cs[i], mem, &sc.matches, d)
		e.answer(ctx, cs, i, d, err, start, &sc.r, answer)
	}
}

// checkRounds decides cs in rounds, each of the next check of every
// caller (dimension and identifier) not decided yet, so that one caller's
// checks are decided in request order. A round's checks, of distinct
// callers, reach distinct counters: they are decided at once, in one call
// of the limiter (CheckGroups: one pipeline to Redis), those with an
// idempotency key on up to workers goroutines beside it.
func (e *Engine) checkRounds(ctx context.Context, st *state, cs []Check, mem *arena, sc *batchScratch, answer answerFunc, workers int) {
	round, next := sc.byCaller(cs)
	for len(round) > 0 {
		e.checkRound(ctx, st, cs, round, mem, sc, answer, workers)
		k := 0
		for _, i := range round {
			if j := next[i]; j >= 0 {
				round[k] = j
				k++
			}
		}
		round = round[:k]
	}
}

// roundCheck is one check of a round: its ops, the memory of its
// results, its Deny rules' results, and, once decided, its error. group is
// its index among the round's groups, or, when it is decided apart,
// -1 - its index among the decisions apart (a check with an idempotency
// key), noOps (no limited rule applies: allowed) or invalidOne (its error
// set when planned).
type roundCheck struct {
	ops    []core.GroupOp
	mem    []core.PolicyResult
	denied []core.PolicyResult
	denies bool
	group  int
	err    error
}

// Markers of roundCheck.group below every decision apart.
const (
	noOps      = math.MinInt
	invalidOne = math.MinInt + 1
)

// checkRound decides the checks cs[i] of round (of distinct callers) and
// hands each its answer (see checkRounds).
func (e *Engine) checkRound(ctx context.Context, st *state, cs []Check, round []int, mem *arena, sc *batchScratch, answer answerFunc, workers int) {
	start := time.Now()
	rcs, groups, idem := e.planRound(st, cs, round, mem, sc)
	apart := e.decideApart(ctx, st, cs, round, rcs, idem, workers, sc, func() {
		if len(groups) > 0 {
			st.lim.CheckGroups(ctx, groups)
		}
	})
	d := &sc.r.Decision
	for k, i := range round {
		rc := &rcs[k]
		switch {
		case rc.group >= 0:
			g := &groups[rc.group]
			*d, rc.err = g.Decision(), g.Err
		case rc.group == noOps:
			*d = core.Decision{Allowed: true}
		case rc.group != invalidOne:
			*d = apart[-1-rc.group]
		}
		switch {
		case rc.err == nil:
			withDenials(d, rc.denied, rc.denies)
		case rc.group != invalidOne:
			rc.err = fmt.Errorf("engine: %w", rc.err)
		}
		e.answer(ctx, cs, i, d, rc.err, start, &sc.r, answer)
	}
}

// decideApart decides the checks of the round listed in idem (their index
// in rcs) on up to workers goroutines while running alongside, and returns
// their Decisions, in the order of idem (their errors are in rcs).
func (e *Engine) decideApart(ctx context.Context, st *state, cs []Check, round []int, rcs []roundCheck, idem []int, workers int, sc *batchScratch, alongside func()) []core.Decision {
	if len(idem) == 0 {
		alongside()
		return nil
	}
	sc.apart = slices.Grow(sc.apart[:0], len(idem))[:len(idem)]
	apart := sc.apart
	var taken atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, len(idem)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := int(taken.Add(1) - 1); k < len(idem); k = int(taken.Add(1) - 1) {
				rc, c := &rcs[idem[k]], &cs[round[idem[k]]]
				scope := [2]string{c.Endpoint, c.Rule}
				call := core.GroupCall{Results: rc.mem, IdempotencyKey: c.IdempotencyKey, Scope: scope[:]}
				apart[k], rc.err = st.decide(ctx, rc.ops, call)
			}
		}()
	}
	alongside()
	wg.Wait()
	return apart
}

// planRound prepares the checks cs[i] of round in sc's arrays: invalid
// ones get their error, those no limited rule applies to are marked, those
// with an idempotency key are listed in idem (their index in rcs), to be
// decided apart, and the others become groups of CheckGroups.
func (e *Engine) planRound(st *state, cs []Check, round []int, mem *arena, sc *batchScratch) (rcs []roundCheck, groups []core.Group, idem []int) {
	clear(sc.rcs)
	rcs = slices.Grow(sc.rcs[:0], len(round))[:len(round)]
	groups = slices.Grow(sc.groups[:0], len(round))
	ops := slices.Grow(sc.ops[:0], len(round))
	idem = sc.idem[:0]
	for k, i := range round {
		rc, c := &rcs[k], &cs[i]
		at := len(ops)
		var err error
		if ops, rc.denied, rc.denies, err = e.prepare(st, c, ops, &sc.matches); err != nil {
			rc.err, rc.group = err, invalidOne
			continue
		}
		rc.ops = ops[at:len(ops):len(ops)]
		rc.mem = mem.take(len(rc.ops))
		switch {
		case len(rc.ops) == 0:
			rc.group = noOps
		case !rc.denies && c.IdempotencyKey != "":
			rc.group = -1 - len(idem)
			idem = append(idem, k)
		default:
			rc.group = len(groups)
			groups = append(groups, core.Group{Ops: rc.ops, Results: rc.mem})
		}
	}
	sc.rcs, sc.groups, sc.ops, sc.idem = rcs, groups, ops, idem
	return rcs, groups, idem
}

// caller is who a check counts: no two checks of distinct callers reach
// one counter (a rule counts one dimension, keyed by identifier).
type caller struct{ dimension, identifier string }

// byCaller chains the checks of each caller (dimension and identifier) in
// request order, in sc's memory: heads holds each caller's first check, in
// the order of first appearance, and next[i] the caller's check after
// cs[i] (-1 after its last).
func (sc *batchScratch) byCaller(cs []Check) (heads, next []int) {
	if sc.last == nil {
		sc.last = make(map[caller]int, len(cs)) // each caller's latest check so far
	}
	heads = sc.heads[:0]
	next = slices.Grow(sc.next[:0], len(cs))[:len(cs)]
	for i := range cs {
		next[i] = -1
		k := caller{cs[i].Dimension, cs[i].Identifier}
		if j, ok := sc.last[k]; ok {
			next[j] = i
		} else {
			heads = append(heads, i)
		}
		sc.last[k] = i
	}
	sc.heads, sc.next = heads, next
	return heads, next
}

// addCost sums the costs of two checks or descriptors of one counter,
// saturating at math.MaxInt64 (a cost no limit admits): a sum that wrapped
// would be decided as a small, zero or negative cost.
func addCost(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// groupKey names a counter of an all-or-nothing batch.
type groupKey struct{ rule, identifier string }

// linearOps is how many ops a batch looks through before it indexes them.
const linearOps = 16

// findOp returns the index in p.ops of the op of rule and identifier, or
// -1; past linearOps ops it indexes them in p.index and uses it.
func (p *batchPlan) findOp(rule, identifier string) int {
	if !p.indexed && len(p.ops) > linearOps {
		if p.index == nil {
			p.index = make(map[groupKey]int, 2*len(p.ops))
		}
		for j := range p.ops {
			p.index[groupKey{p.ops[j].Policy, p.ops[j].Identity}] = j
		}
		p.indexed = true
	}
	if p.indexed {
		if j, ok := p.index[groupKey{rule, identifier}]; ok {
			return j
		}
		return -1
	}
	for j := range p.ops {
		if p.ops[j].Policy == rule && p.ops[j].Identity == identifier {
			return j
		}
	}
	return -1
}

func kindOf(c *Check) Kind {
	if c.Cost == 0 {
		return KindPeek
	}
	return KindCheck
}

// binding picks the most constraining of rs as core does for a request:
// among denials the longest RetryAfter; among admissions the fewest
// Remaining, then the longest ResetAfter; shadow rules bind only when
// every rule is a shadow.
func binding(rs []core.PolicyResult) int {
	best := 0
	for i := 1; i < len(rs); i++ {
		a, b := &rs[i], &rs[best]
		if a.Shadow != b.Shadow {
			if b.Shadow {
				best = i
			}
			continue
		}
		switch {
		case a.Allowed != b.Allowed:
			if !a.Allowed {
				best = i
			}
		case !a.Allowed:
			if a.RetryAfter > b.RetryAfter {
				best = i
			}
		case a.Remaining != b.Remaining:
			if a.Remaining < b.Remaining {
				best = i
			}
		case a.ResetAfter > b.ResetAfter:
			best = i
		}
	}
	return best
}
