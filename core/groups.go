package core

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Group is one group of a CheckGroups call: its ops, and, once decided,
// its Decision (Allowed, Results and Binding) or its error.
type Group struct {
	// Ops are the group's, as CheckGroup's.
	Ops []GroupOp
	// Results is the memory of the Decision's Results when its capacity
	// holds len(Ops) results (as GroupCall.Results; nil: CheckGroups gives
	// the groups without one array of their own). CheckGroups sets it to
	// the Decision's Results.
	Results []PolicyResult
	// Allowed and Binding are the Decision's, when Err is nil.
	Allowed bool
	Binding int
	// Err is the group's error, as CheckGroup's.
	Err error
}

// Decision returns the group's Decision, as CheckGroup returns it (it may
// be refunded with Refund).
func (g *Group) Decision() Decision {
	return Decision{Allowed: g.Allowed, Results: g.Results, Binding: g.Binding}
}

// set makes d, returned by CheckGroupWith with err, g's answer.
func (g *Group) set(d Decision, err error) {
	g.Results, g.Allowed, g.Binding, g.Err = d.Results, d.Allowed, d.Binding, err
}

// CheckGroups decides each of groups on its own, as CheckGroup decides one
// (all or nothing within the group, each with its own Decision or error),
// in one call of the Limiter's Store when it is an EachTaker: the Redis
// store sends every group's script in one pipeline to each server, so that
// a batch of independent checks costs one round trip, not one per group.
// Another Store decides them one after the other. The groups are
// independent: none waits for another, and two groups of one key are
// decided as two concurrent CheckGroup calls would be, in either order (a
// caller that needs one decided after the other makes two calls).
// Idempotency does not apply: CheckGroupWith decides a group with an
// idempotency key.
func (l *Limiter) CheckGroups(ctx context.Context, groups []Group) {
	et, ok := l.store.(EachTaker)
	if !ok || len(groups) < 2 {
		for i := range groups {
			g := &groups[i]
			g.set(l.CheckGroupWith(ctx, g.Ops, GroupCall{Results: g.Results}))
		}
		return
	}
	gb, _ := l.groups.Get().(*groupsBuf)
	if gb == nil {
		gb = new(groupsBuf)
	}
	defer l.putGroups(gb)
	takes, of := l.prepareGroups(groups, gb)
	var sc *detached
	if ctx.Done() != nil {
		sc = new(detached)
	}
	sctx, cancel := l.storeContext(ctx, sc)
	et.TakeEach(sctx, takes)
	if cancel != nil {
		cancel()
	}
	if sc != nil {
		sc.parent = nil // keeps no context
	}
	for k := range takes {
		t, g := &takes[k], &groups[of[k]]
		if t.Err != nil {
			g.set(Decision{}, takeError(g.Results, t.Err))
			continue
		}
		// g's Decision in place (as run and settle make one)
		rs := g.Results
		for j := range rs {
			rs[j].Result = t.Out[j]
		}
		g.Allowed, g.Binding, g.Err = !refused(rs), binding(rs), nil
		for j := range rs {
			rs[j].settle()
		}
	}
}

// groupsBuf holds the arrays of one CheckGroups call's store call,
// pooled: the Takes, the group of each, their ops and their results.
type groupsBuf struct {
	takes []Take
	of    []int
	ops   []Op
	out   []Result
}

// putGroups returns gb to the pool, keeping no identity.
func (l *Limiter) putGroups(gb *groupsBuf) {
	clear(gb.takes)
	clear(gb.ops)
	gb.takes, gb.of, gb.ops = gb.takes[:0], gb.of[:0], gb.ops[:0]
	l.groups.Put(gb)
}

// prepareGroups fills each group's Results up to the store call (an
// invalid group gets its error, a group of no op its Decision) and returns
// the Takes of the others, their ops and results in gb's arrays, and of,
// the group of each Take. The groups that give no memory for their Results
// share one array.
func (l *Limiter) prepareGroups(groups []Group, gb *groupsBuf) (takes []Take, of []int) {
	n, need := 0, 0
	for i := range groups {
		n += len(groups[i].Ops)
		if cap(groups[i].Results) < len(groups[i].Ops) {
			need += len(groups[i].Ops)
		}
	}
	takes, of = slices.Grow(gb.takes[:0], len(groups)), slices.Grow(gb.of[:0], len(groups))
	ops := slices.Grow(gb.ops[:0], n)
	if cap(gb.out) < n {
		gb.out = make([]Result, n)
	}
	out := gb.out[:n]
	var own []PolicyResult
	if need > 0 {
		own = make([]PolicyResult, 0, need)
	}
	for i := range groups {
		g := &groups[i]
		var d Decision
		if m := len(g.Ops); cap(g.Results) >= m {
			d.Results = g.Results[:0:m]
		} else {
			d.Results, own = own[len(own):len(own):len(own)+m], own[:len(own)+m]
		}
		if len(g.Ops) == 0 {
			g.set(Decision{Allowed: true}, nil)
			continue
		}
		if err := l.prepareGroup(g.Ops, &d); err != nil {
			g.set(Decision{}, err)
			continue
		}
		g.set(d, nil) // its Results prepared, decided by the Take
		at := len(ops)
		for j := range d.Results {
			ops = append(ops, d.Results[j].op())
		}
		takes = append(takes, Take{Ops: ops[at:len(ops):len(ops)], Out: out[at:len(ops):len(ops)]})
		of = append(of, i)
	}
	gb.takes, gb.of, gb.ops = takes, of, ops
	return takes, of
}

// takeError is the error of a group whose store call failed, as run and
// take word it.
func takeError(rs []PolicyResult, err error) error {
	if len(rs) == 1 {
		return fmt.Errorf("sluice: policy %q: %w", rs[0].Policy, err)
	}
	names := make([]string, len(rs))
	for j := range rs {
		names[j] = strconv.Quote(rs[j].Policy)
	}
	return fmt.Errorf("sluice: policies %s: %w", strings.Join(names, ", "), err)
}
