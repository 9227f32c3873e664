package engine

import (
	"context"
	"fmt"
	"math"
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
	st := e.cur.Load()
	if allOrNothing {
		e.checkAll(ctx, st, cs, results, errs)
	} else {
		e.checkEach(ctx, st, cs, results, errs)
	}
	return results, errs
}

// batchPlan is an all-or-nothing batch's one decision: the ops of every
// counter its checks reach, and which of them (or of the Deny rules'
// results) answers each check.
type batchPlan struct {
	ops    []core.GroupOp
	memb   []int               // cs[i] is decided by ops[memb[k]] (denied[-1-memb[k]] if negative), bound[i] <= k < bound[i+1]
	bound  []int               // into memb
	index  map[groupKey]int    // ops by rule and identifier, for large batches
	denied []core.PolicyResult // of Deny rules
	denies bool                // a Deny rule (not a shadow) denies the batch
}

// checkAll decides cs all or nothing into results and errs (see
// CheckBatch).
func (e *Engine) checkAll(ctx context.Context, st *state, cs []Check, results []Result, errs []error) {
	start := time.Now()
	p, bad := e.planAll(st, cs, errs)
	fail := func(err func(i int) error) {
		for i := range errs {
			errs[i] = err(i)
			e.observe(ctx, kindOf(&cs[i]), &cs[i], nil, nil, start, errs[i])
		}
	}
	if bad {
		fail(func(i int) error {
			if errs[i] != nil {
				return errs[i]
			}
			return invalid("all_or_nothing", "not decided: another check of the batch is invalid")
		})
		return
	}
	d := core.Decision{Allowed: true}
	if len(p.ops) > 0 {
		var err error
		if d, err = st.decide(ctx, p.ops, core.GroupCall{}); err != nil {
			err = fmt.Errorf("engine: batch: %w", err)
			fail(func(int) error { return err })
			return
		}
		// The store's all or nothing is over the takes: a peek that finds
		// its counter spent refuses nothing, and the batch was counted.
		d.Allowed = !groupRefused(p.ops, d.Results)
	}
	if p.denies {
		d.Allowed = false
	}
	prs := make([]core.PolicyResult, len(p.memb)) // every check's results, one array
	for k, j := range p.memb {
		if j < 0 {
			prs[k] = p.denied[-1-j]
		} else {
			prs[k] = d.Results[j]
		}
	}
	for i := range cs {
		di := core.Decision{Allowed: d.Allowed}
		if lo, hi := p.bound[i], p.bound[i+1]; hi > lo {
			di.Results = prs[lo:hi:hi]
			di.Binding = binding(di.Results)
		}
		e.observe(ctx, kindOf(&cs[i]), &cs[i], nil, &di, start, nil)
		results[i] = resultOf(di)
	}
}

// planAll matches every check of cs once and returns the batch's plan: two
// checks counted by one rule and identifier sum their costs in one op, and
// a Deny rule that denies makes every op a peek. bad: some check is
// invalid (its error is in errs).
func (e *Engine) planAll(st *state, cs []Check, errs []error) (p batchPlan, bad bool) {
	p = batchPlan{ops: make([]core.GroupOp, 0, len(cs)), memb: make([]int, 0, len(cs)), bound: make([]int, len(cs)+1)}
	var now time.Time
	var rbuf [opsBuf]*rules.Rule // each check's matches
	for i := range cs {
		p.bound[i] = len(p.memb)
		c := &cs[i]
		r, err := e.validate(st, c)
		if err != nil {
			errs[i], bad = err, true
			continue
		}
		matched := rbuf[:0]
		if r != nil {
			matched = append(matched, r)
		} else {
			matched = st.snap.AppendMatch(matched, "", c.Dimension, c.Endpoint)
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
	return p, bad
}

// addCheck adds c's cost to the op of rule m's counter of c's identifier
// (a new op if it has none yet) and returns the op's index.
func (p *batchPlan) addCheck(st *state, m *rules.Rule, c *Check) int {
	if j := findOp(p.ops, &p.index, m.ID, c.Identifier); j >= 0 {
		p.ops[j].Cost = addCost(p.ops[j].Cost, c.Cost)
		return j
	}
	j := len(p.ops)
	op := core.GroupOp{Policy: m.ID, Identity: c.Identifier, Cost: c.Cost}
	if len(m.Tiers) > 0 {
		op.Tier = st.snap.TierOf(c.Dimension, c.Identifier)
	}
	p.ops = append(p.ops, op)
	if p.index != nil {
		p.index[groupKey{m.ID, c.Identifier}] = j
	}
	return j
}

// checkEach decides each of cs on its own into results and errs: in
// order on the caller's goroutine, or, with parallelism, in rounds (see
// checkRounds).
func (e *Engine) checkEach(ctx context.Context, st *state, cs []Check, results []Result, errs []error) {
	if workers := min(e.cfg.parallel, len(cs)); workers > 1 && st.lim != nil {
		e.checkRounds(ctx, st, cs, results, errs, workers)
		return
	}
	// In order: the results share one array, and the store calls one
	// context detached from ctx (as each would be).
	dctx, mem := context.WithoutCancel(ctx), &arena{buf: make([]core.PolicyResult, 0, len(cs))}
	for i := range cs {
		e.checkOne(ctx, dctx, st, &cs[i], mem, &results[i], &errs[i])
	}
}

// checkRounds decides cs in rounds, each of the next check of every
// caller (dimension and identifier) not decided yet, so that one caller's
// checks are decided in request order. A round's checks, of distinct
// callers, reach distinct counters: they are decided at once, in one call
// of the limiter (CheckGroups: one pipeline to Redis), those with an
// idempotency key on up to workers goroutines beside it. The results share
// one array.
func (e *Engine) checkRounds(ctx context.Context, st *state, cs []Check, results []Result, errs []error, workers int) {
	heads, next := byCaller(cs)
	mem := &arena{buf: make([]core.PolicyResult, 0, len(cs))}
	for round := heads; len(round) > 0; {
		e.checkRound(ctx, st, cs, round, mem, results, errs, workers)
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

// checkRound decides the checks cs[i] of round (of distinct callers) into
// results and errs (see checkRounds).
func (e *Engine) checkRound(ctx context.Context, st *state, cs []Check, round []int, mem *arena, results []Result, errs []error, workers int) {
	start := time.Now()
	rcs, groups, idem := e.planRound(st, cs, round, mem)
	apart := e.decideApart(ctx, st, cs, round, rcs, idem, workers, func() {
		if len(groups) > 0 {
			st.lim.CheckGroups(ctx, groups)
		}
	})
	for k, i := range round {
		rc, c := &rcs[k], &cs[i]
		var d core.Decision
		switch {
		case rc.group >= 0:
			d, rc.err = groups[rc.group].Decision(), groups[rc.group].Err
		case rc.group == noOps:
			d = core.Decision{Allowed: true}
		case rc.group != invalidOne:
			d = apart[-1-rc.group]
		}
		switch {
		case rc.err == nil:
			d = withDenials(d, rc.denied, rc.denies)
		case rc.group != invalidOne:
			rc.err = fmt.Errorf("engine: %w", rc.err)
		}
		if rc.err != nil {
			e.observe(ctx, kindOf(c), c, nil, nil, start, rc.err)
			errs[i] = rc.err
			continue
		}
		e.observe(ctx, kindOf(c), c, nil, &d, start, nil)
		results[i] = resultOf(d)
	}
}

// decideApart decides the checks of the round listed in idem (their index
// in rcs) on up to workers goroutines while running alongside, and returns
// their Decisions, in the order of idem (their errors are in rcs).
func (e *Engine) decideApart(ctx context.Context, st *state, cs []Check, round []int, rcs []roundCheck, idem []int, workers int, alongside func()) []core.Decision {
	if len(idem) == 0 {
		alongside()
		return nil
	}
	apart := make([]core.Decision, len(idem))
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

// planRound prepares the checks cs[i] of round: invalid ones get their
// error, those no limited rule applies to are marked, those with an
// idempotency key are listed in idem (their index in rcs), to be decided
// apart, and the others become groups of CheckGroups.
func (e *Engine) planRound(st *state, cs []Check, round []int, mem *arena) (rcs []roundCheck, groups []core.Group, idem []int) {
	rcs = make([]roundCheck, len(round))
	groups = make([]core.Group, 0, len(round))
	ops := make([]core.GroupOp, 0, len(round))
	for k, i := range round {
		rc, c := &rcs[k], &cs[i]
		at := len(ops)
		var err error
		if ops, rc.denied, rc.denies, err = e.prepare(st, c, ops); err != nil {
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
	return rcs, groups, idem
}

// checkOne decides c on dctx (ctx for the observers) into *res or *err,
// its results in mem's memory when it has room.
func (e *Engine) checkOne(ctx, dctx context.Context, st *state, c *Check, mem *arena, res *Result, err *error) {
	start := time.Now()
	d, cerr := e.check(dctx, st, c, mem)
	e.observe(ctx, kindOf(c), c, nil, &d, start, cerr)
	if cerr != nil {
		*err = cerr
		return
	}
	*res = resultOf(d)
}

// caller is who a check counts: no two checks of distinct callers reach
// one counter (a rule counts one dimension, keyed by identifier).
type caller struct{ dimension, identifier string }

// byCaller chains the checks of each caller (dimension and identifier) in
// request order: heads holds each caller's first check, in the order of
// first appearance, and next[i] the caller's check after cs[i] (-1 after
// its last).
func byCaller(cs []Check) (heads, next []int) {
	last := make(map[caller]int, len(cs)) // each caller's latest check so far
	next = make([]int, len(cs))
	for i := range cs {
		next[i] = -1
		k := caller{cs[i].Dimension, cs[i].Identifier}
		if j, ok := last[k]; ok {
			next[j] = i
		} else {
			heads = append(heads, i)
		}
		last[k] = i
	}
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

// findOp returns the index in ops of the op of rule and identifier, or -1;
// past linearOps ops it builds and uses *index.
func findOp(ops []core.GroupOp, index *map[groupKey]int, rule, identifier string) int {
	if *index == nil && len(ops) > linearOps {
		*index = make(map[groupKey]int, 2*len(ops))
		for j := range ops {
			(*index)[groupKey{ops[j].Policy, ops[j].Identity}] = j
		}
	}
	if *index != nil {
		if j, ok := (*index)[groupKey{rule, identifier}]; ok {
			return j
		}
		return -1
	}
	for j := range ops {
		if ops[j].Policy == rule && ops[j].Identity == identifier {
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
