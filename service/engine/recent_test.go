package engine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/engine"
)

func TestRecentThroughTheEngine(t *testing.T) {
	ctx := context.Background()
	clock := &fixedClock{now: time.Now()}
	store, err := memorystore.New(memorystore.WithClock(clock.Now))
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	recent := engine.NewRecent(time.Minute, 100)
	e, err := engine.New(ctx, store, newSource(overrideSnap(t, "1")), engine.WithClock(clock.Now), engine.WithObserver(recent))
	require.NoError(t, err)

	spend(t, e, order("ann"), 2) // normal
	require.Empty(t, recent.List(clock.Now()))
	spend(t, e, order("ann"), 1) // 3 of 3: warning
	clock.Add(time.Second)
	require.False(t, mustCheck(t, e, order("ann")).Allowed) // throttled
	spend(t, e, order("bob"), 1)
	// A peek of a spent caller is not recorded.
	peek := order("carl")
	spend(t, e, order("carl"), 3)
	clock.Add(time.Second)
	peek.Cost = 0
	require.False(t, mustCheck(t, e, peek).Allowed)
	// A batch item is.
	_, errs := e.CheckBatch(ctx, []engine.Check{order("dan"), order("dan"), order("dan"), order("dan")}, false)
	for _, err := range errs {
		require.NoError(t, err)
	}

	got := recent.List(clock.Now())
	require.Len(t, got, 3)
	at := func(id string) engine.Flagged {
		for _, f := range got {
			if f.Identifier == id {
				return f
			}
		}
		t.Fatalf("%s not flagged: %+v", id, got)
		return engine.Flagged{}
	}
	ann := at("ann")
	require.Equal(t, engine.Flagged{Rule: "orders", Dimension: "user", Identifier: "ann", State: core.Throttled, Count: 2, Warnings: 1, Throttles: 1, Last: ann.Last}, ann, "warned, then throttled: both counted")
	require.WithinDuration(t, clock.Now().Add(-time.Second), ann.Last, time.Millisecond)
	require.Equal(t, core.Warning, at("carl").State, "carl's peek is not recorded: only the warning of his checks")
	require.EqualValues(t, 1, at("carl").Count)
	require.Equal(t, core.Throttled, at("dan").State)
	require.EqualValues(t, 2, at("dan").Count)
	require.Equal(t, "dan", got[0].Identifier, "most recent first")
	require.Equal(t, "ann", got[2].Identifier)

	// Past the window, nothing.
	clock.Add(time.Minute)
	require.Empty(t, recent.List(clock.Now()))
	// Back after a whole window: a new count.
	clock.Add(time.Hour) // dan's window of the fixed window ends
	spend(t, e, order("dan"), 3)
	got = recent.List(clock.Now())
	require.Len(t, got, 1)
	require.Equal(t, core.Warning, got[0].State)
	require.EqualValues(t, 1, got[0].Count)
}

// flagged is an Event of one rule's decision of identifier in state at.
func flagged(rule, identifier string, state core.State, at time.Time) *engine.Event {
	d := &core.Decision{Allowed: state != core.Throttled, Results: []core.PolicyResult{{Policy: rule, Result: core.Result{State: state, At: at.UnixMicro()}}}}
	return &engine.Event{Kind: engine.KindCheck, Decision: d, Dimension: "user", Identifier: identifier}
}

func TestRecentBoundedUnderAFlood(t *testing.T) {
	const maxEntries = 1000
	r := engine.NewRecent(time.Hour, maxEntries)
	ctx := context.Background()
	start := time.Now()
	ev := flagged("r", "", core.Throttled, start)
	for i := range 100_000 {
		ev.Identifier = fmt.Sprintf("attacker-%d", i)
		ev.Decision.Results[0].At = start.Add(time.Duration(i) * time.Microsecond).UnixMicro()
		r.Decided(ctx, ev)
		if i%10_000 == 0 {
			require.LessOrEqual(t, r.Len(), maxEntries)
		}
	}
	require.Equal(t, maxEntries, r.Len())
	got := r.List(start.Add(time.Second))
	require.Len(t, got, maxEntries)
	require.Equal(t, "attacker-99999", got[0].Identifier, "the newest kept")
	require.Equal(t, "attacker-99000", got[maxEntries-1].Identifier, "the oldest evicted")
}

func TestRecentEvictsLeastRecentlySeen(t *testing.T) {
	r := engine.NewRecent(time.Hour, 2)
	ctx := context.Background()
	now := time.Now()
	r.Decided(ctx, flagged("r", "a", core.Warning, now))
	r.Decided(ctx, flagged("r", "b", core.Warning, now.Add(time.Second)))
	r.Decided(ctx, flagged("r", "a", core.Throttled, now.Add(2*time.Second))) // a seen again
	r.Decided(ctx, flagged("r", "c", core.Warning, now.Add(3*time.Second)))   // evicts b
	got := r.List(now.Add(4 * time.Second))
	require.Len(t, got, 2)
	require.Equal(t, "c", got[0].Identifier)
	require.Equal(t, "a", got[1].Identifier)
	require.Equal(t, core.Throttled, got[1].State)
	require.EqualValues(t, 2, got[1].Count)
	// Entries past the window make room first, and are not listed.
	r2 := engine.NewRecent(time.Second, 10)
	r2.Decided(ctx, flagged("r", "old", core.Warning, now))
	r2.Decided(ctx, flagged("r", "new", core.Warning, now.Add(5*time.Second)))
	require.Equal(t, 1, r2.Len())
	require.Equal(t, "new", r2.List(now.Add(5 * time.Second))[0].Identifier)
}

func TestRecentNoAllocationOnTheDecidePath(t *testing.T) {
	r := engine.NewRecent(time.Minute, 10)
	ctx := context.Background()
	normal := flagged("r", "u", core.Normal, time.Now())
	require.Zero(t, testing.AllocsPerRun(1000, func() { r.Decided(ctx, normal) }))
	require.Zero(t, r.Len())
	again := flagged("r", "u", core.Throttled, time.Now())
	r.Decided(ctx, again)
	require.Zero(t, testing.AllocsPerRun(1000, func() { r.Decided(ctx, again) }), "a caller already flagged costs no allocation")
	// Decisions that are not recorded.
	for _, ev := range []*engine.Event{
		{Kind: engine.KindCheck, Err: engine.ErrInvalid, Dimension: "user", Identifier: "x"},
		{Kind: engine.KindPeek, Decision: again.Decision, Dimension: "user", Identifier: "x"},
		{Kind: engine.KindDescriptors, Decision: again.Decision},
	} {
		r.Decided(ctx, ev)
	}
	require.Equal(t, 1, r.Len())
}

func TestRecentConcurrent(t *testing.T) {
	r := engine.NewRecent(time.Minute, 50)
	ctx := context.Background()
	now := time.Now()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				r.Decided(ctx, flagged("r", fmt.Sprintf("u%d", (w*7+i)%120), core.State(1+i%2), now))
				if i%200 == 0 {
					require.LessOrEqual(t, len(r.List(now)), 50)
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, 50, r.Len())
}

// Envoy's descriptors are recorded under their counter's identity.
func TestRecentDescriptors(t *testing.T) {
	ctx := context.Background()
	recent := engine.NewRecent(time.Minute, 100)
	e, err := engine.New(ctx, memStore(t), newSource(envoyRules(t, core.FixedWindow)), engine.WithObserver(recent))
	require.NoError(t, err)
	for range 4 {
		_, err := e.Descriptors(ctx, "edge", []engine.Descriptor{path("/x"), ip("10.0.0.1")})
		require.NoError(t, err)
	}
	_, err = e.Descriptors(ctx, "edge", []engine.Descriptor{ip("10.0.0.2")})
	require.NoError(t, err)
	got := recent.List(time.Now())
	require.Len(t, got, 1)
	f := got[0]
	require.Equal(t, "per-ip", f.Rule)
	require.Equal(t, "", f.Dimension)
	require.Equal(t, "edge|remote_address=10.0.0.1", f.Identifier)
	require.Equal(t, core.Throttled, f.State)
	require.EqualValues(t, 2, f.Count, "the warning at 3 of 3, then the denial")
}

// A Deny rule's denial of a descriptor is recorded under its identity,
// beside the other counters of the request (peeked: Normal, not recorded).
func TestRecentDenyDescriptors(t *testing.T) {
	ctx := context.Background()
	recent := engine.NewRecent(time.Minute, 100)
	e, err := engine.New(ctx, memStore(t), newSource(parse(t, envoyDeny)), engine.WithObserver(recent))
	require.NoError(t, err)
	r, err := e.Descriptors(ctx, "edge", []engine.Descriptor{desc("remote_address", "192.0.2.7", 1), desc("banned", "192.0.2.7", 1)})
	require.NoError(t, err)
	require.False(t, r.Allowed)
	got := recent.List(time.Now())
	require.Len(t, got, 1)
	require.Equal(t, "edge|banned=192.0.2.7", got[0].Identifier)
	require.Equal(t, core.Throttled, got[0].State)
	ban, _ := e.Snapshot().Rule(got[0].Rule)
	require.True(t, ban.Deny)
}

func BenchmarkRecentDecided(b *testing.B) {
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		state core.State
		ids   int
	}{{"normal", core.Normal, 1}, {"flagged-same", core.Throttled, 1}, {"flagged-distinct", core.Throttled, 1 << 20}} {
		b.Run(c.name, func(b *testing.B) {
			r := engine.NewRecent(time.Minute, 10_000)
			ids := make([]string, min(c.ids, 4096))
			for i := range ids {
				ids[i] = fmt.Sprintf("caller-%d", i)
			}
			ev := flagged("r", ids[0], c.state, time.Now())
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if c.ids > 1 {
					ev.Identifier = ids[i%len(ids)]
				}
				r.Decided(ctx, ev)
			}
		})
	}
}
