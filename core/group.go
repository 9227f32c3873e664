package core

import (
	"context"
	"fmt"
)

// GroupOp is one member of a CheckGroup: Cost units of Identity under the
// named policy.
type GroupOp struct {
	// Policy names a policy of the Limiter.
	Policy string
	// Identity is what the policy's Key would return for the caller
	// counted (as for AllowN). Required.
	Identity string
	// Tier, when the policy has Tiers, picks that tier's limit; "" or a
	// tier the policy does not list means its Limit.
	Tier string
	// Cost is how many units the op takes: 0 peeks (it reports whether a
	// cost of 1 would be admitted now, counting nothing). Negative is an
	// error.
	Cost int64
}

// GroupCall adjusts one CheckGroupWith.
type GroupCall struct {
	// IdempotencyKey, when set on a Limiter built WithIdempotency, makes a
	// group that repeats an admitted one free, up to MaxRepeats times
	// within the TTL, as a request with an idempotency key. A repeat is
	// the same call: the same IdempotencyKey and Scope, and the same ops
	// (policy, identity and cost of each, in order); anything else is
	// counted. A group with no op that takes (cost 0 only) writes no
	// record. The record lives with the identity of the first op that
	// takes (on a Redis Cluster, in that identity's slot).
	IdempotencyKey string
	// Scope is what else, beyond its ops, makes two calls the same for
	// IdempotencyKey (a service puts there the endpoint and the rule its
	// caller named, say): calls that differ in Scope are never repeats of
	// one another. Ignored without IdempotencyKey.
	Scope []string
	// Results, when its capacity holds len(ops) results, is the memory of
	// the Decision's Results (its first len(ops) elements are written): a
	// caller deciding many groups gives each its part of one array. nil:
	// the Decision has its own.
	Results []PolicyResult
}

// CheckGroup is CheckGroupWith without idempotency.
func (l *Limiter) CheckGroup(ctx context.Context, ops []GroupOp) (Decision, error) {
	return l.CheckGroupWith(ctx, ops, GroupCall{})
}

// CheckGroupWith decides ops all or nothing, outside any request: every
// op is admitted and counted, or, if one whose policy is not a shadow is
// denied its cost, none counts anything (as the policies of one request).
// An op of cost 0 beside ops that take only answers (its PolicyResult says
// whether a cost of 1 would pass) and refuses nothing; a group of peeks
// only is Allowed when each would pass, as Peek. It is the key-level form
// of Check for callers that name each policy, identity, tier and cost
// themselves: a service deciding the descriptors of one call, each with
// its own cost, or several checks of one batch. call carries the group's
// idempotency key (see GroupCall).
//
// The Decision has one PolicyResult per op, in the order of ops, with
// Allowed, Binding and each Limit (the limit applied: an override's when
// one applied) as for a request; Repeat is set for a free repeat. It may
// be copied and refunded (see Refund). The policies' Match, Key and
// MissingKey, and the Limiter's tiering, do not apply (the caller names
// the policy, the identity and the tier); Shadow, Tiers, overrides and
// blocks do, as does the guard's failure policy under a guard. Hooks and
// Observers are not called. Ops must name distinct keys (policy and
// identity): two ops of one key are an error wrapping ErrInvalidCost (give
// one op their summed cost). An unknown policy, an empty identity
// (ErrNoKey) or a negative cost (ErrInvalidCost) is an error naming the
// op; so is a store failure. Like a request's decision, it runs on a
// context detached from ctx's cancellation, bounded by WithStoreTimeout.
func (l *Limiter) CheckGroupWith(ctx context.Context, ops []GroupOp, call GroupCall) (Decision, error) {
	var d Decision
	err := l.CheckGroupTo(ctx, ops, call, &d)
	return d, err
}

// CheckGroupTo is CheckGroupWith writing the Decision to *d instead of
// returning it (*d is overwritten: zero on an error): a caller deciding
// many groups one after the other (a service's batch) keeps the Decision
// of each where it reads it, without copying it out of the call. *d may
// be copied afterwards, as CheckGroupWith's Decision.
func (l *Limiter) CheckGroupTo(ctx context.Context, ops []GroupOp, call GroupCall, d *Decision) error {
	*d = Decision{}
	if len(ops) == 0 {
		d.Allowed = true
		return nil
	}
	sc := groupMemory(ctx, len(ops), call.Results, d)
	if err := l.prepareGroup(ops, d); err != nil {
		*d = Decision{}
		return err
	}
	sctx, cancel := l.storeContext(ctx, sc)
	var err error
	if a := anchor(d.Results); a >= 0 && call.IdempotencyKey != "" && l.cfg.idem != nil {
		err = l.idempotent(sctx, d, groupRecord(&call, d, a))
	} else {
		err = l.run(sctx, d, nil, nil)
	}
	if cancel != nil {
		cancel()
	}
	if sc != nil {
		sc.parent = nil // keeps no context
	}
	if err != nil {
		*d = Decision{}
		return err
	}
	d.settle()
	return nil
}

// groupOne holds the Result of a group of one op and the context of its
// store calls, in one allocation.
type groupOne struct {
	results [1]PolicyResult
	sctx    detached
}

// groupMemory gives d's Results room for n results, in results when it
// has it, else in memory of their own (never d.buf: d is returned by
// value), and returns the context its store calls will run on when ctx
// must be detached from (nil when ctx has no cancellation).
func groupMemory(ctx context.Context, n int, results []PolicyResult, d *Decision) *detached {
	switch {
	case cap(results) >= n:
		d.Results = results[:0:n]
		if ctx.Done() == nil {
			return nil
		}
		return new(detached)
	case n == 1:
		one := new(groupOne)
		d.Results = one.results[:0]
		return &one.sctx
	}
	d.Results = make([]PolicyResult, 0, n)
	return new(detached)
}

// prepareGroup fills d's Results for ops, up to the store call: each op's
// policy, limit and tier. An op with an empty identity, a negative cost or
// an unknown policy is an error naming it.
func (l *Limiter) prepareGroup(ops []GroupOp, d *Decision) error {
	set := l.set.Load()
	d.Allowed = true
	for i := range ops {
		op := &ops[i]
		if op.Identity == "" {
			return fmt.Errorf("sluice: CheckGroup: %w (policy %q)", invalidField(ErrNoKey, opField(i, "Identity"), "empty key"), op.Policy)
		}
		if op.Cost < 0 {
			return fmt.Errorf("sluice: CheckGroup: %w (policy %q)", invalidField(ErrInvalidCost, opField(i, "Cost"), "must not be negative, got %d", op.Cost), op.Policy)
		}
		j, ok := set.byName[op.Policy]
		if !ok {
			return fmt.Errorf("sluice: CheckGroup: %w", invalidField(nil, opField(i, "Policy"), "no policy %q", op.Policy))
		}
		p := &set.policies[j]
		pr := PolicyResult{Policy: p.Name, Limit: p.Limit, Shadow: p.Shadow, refund: p.Refund, id: op.Identity, cost: op.Cost, lease: p.Lease}
		if len(p.Tiers) > 0 { // no map lookup for a policy without tiers
			if tl, ok := p.tiers[op.Tier]; ok {
				pr.Limit, pr.Tier = *tl, op.Tier
			}
		}
		d.Results = append(d.Results, pr)
	}
	return nil
}
