package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/rules"
)

// An override of the rules (rules.Override: a temporary limit or block of
// one native rule for one caller) is applied to the store through core
// (Limiter.SetOverride and Block, Store.ClearOverride), under exactly the
// key a check of that rule and caller counts on: the rule's ID and the
// caller's identifier. Every instance applies the overrides of the
// snapshot it puts in force: at start all that are in force, later what
// changed (new, or another limit, end or revision: set; gone: cleared).
// The store keeps an override already in force when it is set again
// (core.Store.SetOverride), so many instances, or a restart, never reset
// what it has counted; it lapses at its Until in the store, with no
// reload.

// overrideKey identifies an override: one rule, one caller.
type overrideKey struct{ rule, dimension, identifier string }

// appliedOverride is what an engine last did with one override: o set on
// the store (ok), or tried and failed (then the store may hold o or the
// one before it, in force at most until until).
type appliedOverride struct {
	o     rules.Override
	until time.Time
	ok    bool
}

// OverridesObserver is an Observer that also learns how the overrides of
// each snapshot put in force were applied to the store. err joins the
// errors of the overrides that could not be set or cleared (they are
// logged, never fatal, and retried: with the next snapshot, and every
// overrideRetry while any is left).
type OverridesObserver interface {
	Observer
	// OverridesApplied is called after the overrides of s were applied
	// (or retried): set is how many were set, cleared how many were
	// cleared.
	OverridesApplied(s *rules.Snapshot, set, cleared int, err error)
}

const (
	// overrideRetry is how often Run applies again the overrides that
	// failed, while any did.
	overrideRetry = time.Second
	// overrideFailures is how many store failures one application takes
	// before it leaves the rest to the next (a store that is down fails
	// them all: the rules are not held up by it).
	overrideFailures = 3
)

// errOverridesLeft is the error of the overrides an application did not
// try, the store failing.
var errOverridesLeft = errors.New("engine: overrides left to retry: the store is failing")

// applyOverrides applies the overrides of st's snapshot to the store: it
// sets those in force that this engine has not set yet (or set with
// another value or revision), and clears those it set that the snapshot
// no longer holds. An override that fails stays to be applied again (see
// retryOverrides); after overrideFailures failures the rest wait too.
func (e *Engine) applyOverrides(ctx context.Context, st *state) {
	e.ovMu.Lock()
	defer e.ovMu.Unlock()
	s := st.snap
	r := overridesRun{
		e: e, ctx: ctx, now: e.cfg.now(),
		want:   make(map[overrideKey]bool, len(s.Overrides())),
		lapsed: map[overrideKey]bool{},
	}
	for _, o := range s.Overrides() {
		k := overrideKey{o.RuleID, o.Dimension, o.Identifier}
		switch {
		case o.Cleared:
			r.lapsed[k] = true
			r.clearTombstone(k, o)
		case o.Active(r.now):
			r.want[k] = true
			r.setInForce(st, k, o)
		} // else lapsed in the store on its own
	}
	r.clearGone()
	r.forgetEnded()
	r.report(s)
}

// overridesRun is one application of a snapshot's overrides (under
// e.ovMu): what it set and cleared, the errors of what failed, and what
// it left to the retry.
type overridesRun struct {
	e                         *Engine
	ctx                       context.Context
	now                       time.Time
	errs                      []error
	set, cleared, left, fails int                  // fails: store failures (retried)
	want                      map[overrideKey]bool // in force in the snapshot
	lapsed                    map[overrideKey]bool // tombstones in the snapshot
}

// try reports whether the run still calls the store: after
// overrideFailures failures it does not, and counts what it leaves.
func (r *overridesRun) try() bool {
	if r.fails >= overrideFailures {
		r.left++
		return false
	}
	return true
}

// clear clears k's override on the store; false when the store failed
// (the error kept, to be retried).
func (r *overridesRun) clear(k overrideKey) bool {
	if err := r.e.store.ClearOverride(r.ctx, core.Key{Identity: k.identifier, Policy: k.rule}); err != nil {
		r.errs = append(r.errs, fmt.Errorf("engine: override of rule %q for a %s: clear: %w", k.rule, k.dimension, err))
		r.fails++
		return false
	}
	r.cleared++
	return true
}

// clearTombstone clears o, cleared before its end (a database's
// tombstone), on the store once by every engine, even one that never set
// it (started after the clear: the store, Redis, may hold it from an
// instance before). One this engine set is cleared by clearGone.
func (r *overridesRun) clearTombstone(k overrideKey, o rules.Override) {
	_, had := r.e.applied[k]
	if rev, done := r.e.ended[k]; had || done && rev == o.Revision {
		return
	}
	if r.try() && r.clear(k) {
		r.e.ended[k] = o.Revision
	}
}

// setInForce sets o, in force, on the store unless this engine has set it
// as it is already.
func (r *overridesRun) setInForce(st *state, k overrideKey, o rules.Override) {
	e := r.e
	cur, had := e.applied[k]
	if had && cur.ok && cur.o == o {
		return
	}
	if !r.try() {
		return // what applied holds stays: tried again next time
	}
	err := e.setOverride(r.ctx, st, o)
	switch {
	case err == nil:
		e.applied[k] = appliedOverride{o: o, until: o.Until, ok: true}
		r.set++
	case permanent(err): // reported once, never retried
		r.errs = append(r.errs, err)
		e.applied[k] = appliedOverride{o: o, until: o.Until, ok: true}
	default:
		r.errs = append(r.errs, err)
		r.fails++
		// Unknown: set again next time; until then the store may hold
		// the one before (clear it if it goes).
		a := appliedOverride{o: o, until: o.Until}
		if had && cur.until.After(a.until) {
			a.until = cur.until
		}
		e.applied[k] = a
	}
}

// clearGone clears on the store the overrides this engine set that the
// snapshot no longer holds in force, so that one ends even when its rule
// went (or stopped counting) too; those past their end lapsed in the
// store on their own.
func (r *overridesRun) clearGone() {
	e := r.e
	for k, a := range e.applied {
		switch {
		case r.want[k]:
		case !r.now.Before(a.until):
			delete(e.applied, k)
		case r.try() && r.clear(k):
			delete(e.applied, k)
		}
	}
}

// forgetEnded forgets the clears of tombstones the snapshot no longer
// holds.
func (r *overridesRun) forgetEnded() {
	for k := range r.e.ended {
		if !r.lapsed[k] {
			delete(r.e.ended, k)
		}
	}
}

// report marks whether anything is left to retry, logs the run and tells
// the OverridesObservers.
func (r *overridesRun) report(s *rules.Snapshot) {
	e := r.e
	if r.left > 0 {
		r.errs = append(r.errs, fmt.Errorf("%w (%d)", errOverridesLeft, r.left))
	}
	e.ovPending.Store(r.fails+r.left > 0)
	err := errors.Join(r.errs...)
	if err != nil {
		e.cfg.log.Error("ratelimitd: overrides not applied; retried", "revision", s.Revision(), "failed", len(r.errs), "err", err)
	} else if r.set+r.cleared > 0 {
		e.cfg.log.Info("ratelimitd: overrides applied", "revision", s.Revision(), "set", r.set, "cleared", r.cleared)
	}
	for _, ob := range e.cfg.observers {
		if oo, ok := ob.(OverridesObserver); ok {
			oo.OverridesApplied(s, r.set, r.cleared, err)
		}
	}
}

// retryOverrides applies the overrides of the snapshot in force again
// every overrideRetry while an application left some, until ctx ends.
func (e *Engine) retryOverrides(ctx context.Context) {
	t := time.NewTicker(overrideRetry)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !e.ovPending.Load() {
			continue
		}
		octx, cancel := overridesContext(ctx)
		e.applyOverrides(octx, e.cur.Load())
		cancel()
	}
}

// errNoCounter is the error of an override of a rule that counts nothing.
var errNoCounter = errors.New("the rule counts nothing (unlimited or deny)")

// permanent reports whether err, of setOverride, would be the same on a
// retry: the override cannot apply to its rule (errNoCounter), or the
// store refuses it as invalid (an Until already past on the store's
// clock, say).
func permanent(err error) bool {
	return errors.Is(err, errNoCounter) || errors.Is(err, core.ErrInvalidLimit)
}

// setOverride sets o on the store, through the snapshot's limiter. The
// error names the rule and the dimension, never the identifier (it is
// logged).
func (e *Engine) setOverride(ctx context.Context, st *state, o rules.Override) error {
	r, _ := st.snap.Rule(o.RuleID)
	if r == nil || st.lim == nil || r.Unlimited || r.Deny {
		return fmt.Errorf("engine: override of rule %q for a %s: %w", o.RuleID, o.Dimension, errNoCounter)
	}
	var err error
	if o.Blocks() {
		err = st.lim.Block(ctx, o.RuleID, o.Identifier, o.Until)
	} else {
		err = st.lim.SetOverride(ctx, o.RuleID, o.Identifier, o.Limit, o.Until)
	}
	if err != nil {
		return fmt.Errorf("engine: override of rule %q for a %s: %w", o.RuleID, o.Dimension, err)
	}
	return nil
}

// overrideTimeout bounds the application of a snapshot's overrides when
// the caller's context has no deadline.
const overrideTimeout = 30 * time.Second

// overridesContext is ctx, detached from its cancellation (a snapshot put
// in force gets its overrides even while the service stops), bounded.
func overridesContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), overrideTimeout)
}
