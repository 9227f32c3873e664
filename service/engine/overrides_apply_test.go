package engine_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rules"
)

// clearCounting counts the ClearOverride calls that reach a
// failingOverrides store.
type clearCounting struct {
	*failingOverrides
	clears atomic.Int64
}

func (c *clearCounting) ClearOverride(ctx context.Context, k core.Key) error {
	c.clears.Add(1)
	return c.failingOverrides.ClearOverride(ctx, k)
}

func (f *failingOverrides) setFailing(fail bool) {
	f.mu.Lock()
	f.fail = fail
	f.mu.Unlock()
}

// tombstone is o cleared at revision rev (its Until the clear, past).
func tombstone(o rules.Override, rev int64) rules.Override {
	o.Cleared, o.Revision, o.Until = true, rev, time.Now().Add(-time.Second)
	return o
}

// A tombstone (an override cleared before its end) is cleared on the
// store by an engine that never set it, once per revision of the clear,
// and again while clearing it fails.
func TestOverrideTombstoneClearedOnce(t *testing.T) {
	ctx := context.Background()
	shared := memStore(t)
	o := rules.Override{RuleID: "orders", Dimension: "user", Identifier: "ann", Limit: core.PerHour(10).WithAlgorithm(core.FixedWindow), Until: time.Now().Add(time.Hour), Revision: 1}

	// Another instance set it on the shared store.
	setter := newSource(overrideSnap(t, "1", o))
	a, err := engine.New(ctx, shared, setter)
	require.NoError(t, err)
	running(t, a)
	require.EqualValues(t, 10, mustCheck(t, a, order("ann")).Limit)

	st := &clearCounting{failingOverrides: &failingOverrides{Store: shared}}
	obs := newApplied()
	src := newSource(overrideSnap(t, "2", tombstone(o, 2)))
	b, err := engine.New(ctx, st, src, engine.WithObserver(obs))
	require.NoError(t, err)
	require.Equal(t, appliedEv{"2", 0, 1, nil}, obs.next(t), "cleared by an engine that never set it")
	require.EqualValues(t, 3, mustCheck(t, b, order("ann")).Limit)
	running(t, b)

	src.next <- overrideSnap(t, "3", tombstone(o, 2))
	require.Equal(t, appliedEv{"3", 0, 0, nil}, obs.next(t), "the same clear: not again")
	require.EqualValues(t, 1, st.clears.Load())

	// Set again elsewhere, cleared again at a later revision.
	o.Revision = 4
	setter.next <- overrideSnap(t, "4", o)
	require.Eventually(t, func() bool { return mustCheck(t, a, order("ann")).Limit == 10 }, 5*time.Second, 10*time.Millisecond)
	src.next <- overrideSnap(t, "5", tombstone(o, 5))
	require.Equal(t, appliedEv{"5", 0, 1, nil}, obs.next(t))
	require.EqualValues(t, 3, mustCheck(t, b, order("ann")).Limit)

	// A clear that fails is retried with no new snapshot.
	o.Revision = 6
	setter.next <- overrideSnap(t, "6", o)
	require.Eventually(t, func() bool { return mustCheck(t, a, order("ann")).Limit == 10 }, 5*time.Second, 10*time.Millisecond)
	st.setFailing(true)
	src.next <- overrideSnap(t, "7", tombstone(o, 7))
	ev := obs.next(t)
	require.Equal(t, 0, ev.cleared)
	require.ErrorIs(t, ev.err, errOverrideDown)
	require.ErrorContains(t, ev.err, `override of rule "orders" for a user: clear`)
	require.NotContains(t, ev.err.Error(), "ann", "no identifier in errors")
	st.setFailing(false)
	require.Equal(t, appliedEv{"7", 0, 1, nil}, obs.until(t, func(ev appliedEv) bool { return ev.err == nil }))
	require.EqualValues(t, 3, mustCheck(t, b, order("ann")).Limit)
}

// A store that is down holds up no clear either: after a few failures the
// tombstones and the overrides gone from the rules are left to the retry.
func TestOverrideClearFailuresBounded(t *testing.T) {
	ctx := context.Background()
	var ovs, tombs []rules.Override
	for i := range 5 {
		o := rules.Override{RuleID: "orders", Dimension: "user", Identifier: fmt.Sprintf("u%d", i), Until: time.Now().Add(time.Hour), Revision: 1}
		ovs, tombs = append(ovs, o), append(tombs, tombstone(o, 2))
	}
	cases := map[string]struct{ first, next *rules.Snapshot }{
		"gone":       {overrideSnap(t, "1", ovs...), overrideSnap(t, "2")},
		"tombstones": {overrideSnap(t, "1"), overrideSnap(t, "2", tombs...)}, // never set here
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			st := &failingOverrides{Store: memStore(t)}
			obs := newApplied()
			src := newSource(c.first)
			e, err := engine.New(ctx, st, src, engine.WithObserver(obs))
			require.NoError(t, err)
			require.NoError(t, obs.next(t).err)
			running(t, e)
			st.setFailing(true)
			src.next <- c.next
			ev := obs.next(t)
			require.Equal(t, 0, ev.cleared)
			require.ErrorIs(t, ev.err, errOverrideDown)
			require.ErrorContains(t, ev.err, "overrides left to retry: the store is failing (2)", "three tries, then the rest left")
			st.setFailing(false)
			require.Equal(t, appliedEv{"2", 0, 5, nil}, obs.until(t, func(ev appliedEv) bool { return ev.err == nil }))
			for i := range 5 {
				require.EqualValues(t, 3, mustCheck(t, e, order(fmt.Sprintf("u%d", i))).Limit)
			}
		})
	}
}

// A change of an override that fails to apply leaves the store with the
// one before it, which is cleared when it goes even after the changed
// one's (earlier) end, as long as the first may still be in force.
func TestOverrideFailedChangeKeepsTheLaterEnd(t *testing.T) {
	ctx := context.Background()
	clock := &fixedClock{now: time.Now()}
	mem, err := memorystore.New(memorystore.WithClock(clock.Now))
	require.NoError(t, err)
	t.Cleanup(func() { mem.Close() })
	st := &clearCounting{failingOverrides: &failingOverrides{Store: mem}}
	long := rules.Override{RuleID: "orders", Dimension: "user", Identifier: "ann", Limit: core.PerHour(10).WithAlgorithm(core.FixedWindow), Until: clock.Now().Add(time.Hour)}
	short := long
	short.Limit, short.Until = core.PerHour(12).WithAlgorithm(core.FixedWindow), clock.Now().Add(time.Minute)
	obs := newApplied()
	src := newSource(overrideSnap(t, "1", long))
	e, err := engine.New(ctx, st, src, engine.WithObserver(obs), engine.WithClock(clock.Now))
	require.NoError(t, err)
	require.Equal(t, appliedEv{"1", 1, 0, nil}, obs.next(t))
	running(t, e)

	st.setFailing(true)
	src.next <- overrideSnap(t, "2", short)
	require.ErrorIs(t, obs.next(t).err, errOverrideDown)
	clock.Add(2 * time.Minute) // past short's end, before long's
	require.EqualValues(t, 10, mustCheck(t, e, order("ann")).Limit, "the store holds the first")
	st.setFailing(false)
	src.next <- overrideSnap(t, "3")
	cleared := 0
	obs.until(t, func(ev appliedEv) bool { // the retry of "2" may clear it first
		cleared += ev.cleared
		return ev.rev == "3"
	})
	require.Equal(t, 1, cleared, "the first is cleared")
	require.EqualValues(t, 3, mustCheck(t, e, order("ann")).Limit)
}
