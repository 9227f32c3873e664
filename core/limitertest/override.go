package limitertest

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
)

// testOverrides checks per-key overrides.
func testOverrides(t *testing.T, newStore Factory) {
	clock := NewClock()
	s := newStore(t, clock.Now)
	ctx := context.Background()
	key := Key(t)
	base := core.PerMinute(2)
	take := func() core.Result {
		t.Helper()
		r, err := TakeOne(ctx, s, key, base, 1)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	take()
	take()
	if r := take(); r.Allowed {
		t.Fatalf("over the base limit: %+v", r)
	}
	// A temporary raise for this key.
	if err := s.SetOverride(ctx, key, core.Override{Limit: core.PerMinute(100), Until: clock.Now().Add(10 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if r := take(); !r.Allowed || r.Capacity != 100 {
		t.Fatalf("raised: %+v", r)
	}
	if r, _ := TakeOne(ctx, s, core.Key{Identity: key.Identity + "-other", Policy: key.Policy}, base, 1); r.Capacity != 2 {
		t.Fatalf("an override is for one key: %+v", r)
	}
	// A block, which wins over everything until it ends. The key's own
	// state, drained, decides after it: one request comes back 30 s after
	// the drain, the whole quota a minute after it, not when the block ends.
	if err := s.SetOverride(ctx, key, core.Override{Until: clock.Now().Add(5 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if r := take(); r.Allowed || r.RetryAfter != 30*time.Second || r.ResetAfter != time.Minute || r.State != core.Throttled {
		t.Fatalf("blocked: %+v", r)
	}
	out := make([]core.Result, 2)
	other := Key(t)
	err := s.Take(ctx, []core.Op{{Key: other, Limit: base, Cost: 1}, {Key: key, Limit: base, Cost: 1}}, out)
	if err != nil || out[1].Allowed || !out[0].Allowed {
		t.Fatalf("a blocked op denies its group: %+v %v", out, err)
	}
	if r, _ := TakeOne(ctx, s, other, base, 0); r.Remaining != 2 {
		t.Fatalf("the group consumed nothing: %+v", r)
	}
	clock.Advance(6 * time.Second)
	if r := take(); r.Allowed {
		t.Fatalf("after the block, the base limit again (its quota was used): %+v", r)
	}
	if err := s.ClearOverride(ctx, key); err != nil {
		t.Fatal(err)
	}
	if err := s.SetOverride(ctx, key, core.Override{Limit: core.PerMinute(5), Until: clock.Now().Add(-time.Second)}); err == nil {
		t.Fatal("an override that already ended is rejected")
	}
	if err := s.SetOverride(ctx, key, core.Override{Limit: core.PerMinute(-5), Until: clock.Now().Add(time.Second)}); err == nil {
		t.Fatal("an invalid override limit is rejected")
	}
}

// testOverridesIdempotent checks that setting the override already in
// force (the same Limit and Until) keeps its state, as N instances
// applying one rule set, or one restarting, do; another Limit or Until
// starts the override afresh.
func testOverridesIdempotent(t *testing.T, newStore Factory) {
	clock := NewClock()
	s := newStore(t, clock.Now)
	ctx := context.Background()
	key := Key(t)
	base := core.PerMinute(2)
	set := func(o core.Override) {
		t.Helper()
		if err := s.SetOverride(ctx, key, o); err != nil {
			t.Fatal(err)
		}
	}
	remaining := func() int64 {
		t.Helper()
		r, err := TakeOne(ctx, s, key, base, 0)
		if err != nil {
			t.Fatal(err)
		}
		return r.Remaining
	}
	spend := func(n int) {
		t.Helper()
		for range n {
			if r, err := TakeOne(ctx, s, key, base, 1); err != nil || !r.Allowed {
				t.Fatalf("under the override: %+v %v", r, err)
			}
		}
	}
	until := clock.Now().Add(time.Minute)
	for _, a := range []core.Algorithm{core.TokenBucket, core.FixedWindow, core.SlidingWindowLog} {
		raise := core.PerHour(10).WithAlgorithm(a)
		set(core.Override{Limit: raise, Until: until})
		spend(3)
		if got := remaining(); got != 7 {
			t.Fatalf("%v: remaining after 3 of 10: %d", a, got)
		}
		set(core.Override{Limit: raise, Until: until})
		if got := remaining(); got != 7 {
			t.Fatalf("%v: the same override set again must keep its count: remaining %d, want 7", a, got)
		}
		// Another Until: a new override, counted afresh.
		until = until.Add(time.Second)
		set(core.Override{Limit: raise, Until: until})
		if got := remaining(); got != 10 {
			t.Fatalf("%v: another Until starts afresh: remaining %d, want 10", a, got)
		}
		spend(3)
		// Another Limit: afresh too.
		set(core.Override{Limit: core.PerHour(11).WithAlgorithm(a), Until: until})
		if got := remaining(); got != 11 {
			t.Fatalf("%v: another Limit starts afresh: remaining %d, want 11", a, got)
		}
	}
	// A block set twice stays a block, and lapses at its Until.
	block := core.Override{Until: clock.Now().Add(2 * time.Second)}
	set(block)
	set(block)
	if r, err := TakeOne(ctx, s, key, base, 1); err != nil || r.Allowed || r.RetryAfter != 2*time.Second {
		t.Fatalf("blocked: %+v %v", r, err)
	}
	// After a block, the same limit override as before starts afresh.
	set(core.Override{Limit: core.PerHour(11), Until: until})
	if got := remaining(); got != 11 {
		t.Fatalf("an override replacing a block starts afresh: remaining %d, want 11", got)
	}
	spend(2)
	// Cleared and set again: afresh.
	if err := s.ClearOverride(ctx, key); err != nil {
		t.Fatal(err)
	}
	set(core.Override{Limit: core.PerHour(11), Until: until})
	if got := remaining(); got != 11 {
		t.Fatalf("an override set after a clear starts afresh: remaining %d, want 11", got)
	}
}
