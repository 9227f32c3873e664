package limitertest

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
)

// overrides is one key of the override tests, under its own limit base.
type overrides struct {
	ctx   context.Context
	t     *testing.T
	s     core.Store
	clock *Clock
	key   core.Key
	base  core.Limit
}

func newOverrides(t *testing.T, newStore Factory) *overrides {
	clock := NewClock()
	return &overrides{ctx: context.Background(), t: t, s: newStore(t, clock.Now), clock: clock, key: Key(t), base: core.PerMinute(2)}
}

// take takes one unit of the key under base.
func (o *overrides) take() core.Result {
	o.t.Helper()
	r, err := TakeOne(o.ctx, o.s, o.key, o.base, 1)
	if err != nil {
		o.t.Fatal(err)
	}
	return r
}

// set sets ov on the key.
func (o *overrides) set(ov core.Override) {
	o.t.Helper()
	if err := o.s.SetOverride(o.ctx, o.key, ov); err != nil {
		o.t.Fatal(err)
	}
}

// remaining peeks what the key has left.
func (o *overrides) remaining() int64 {
	o.t.Helper()
	r, err := TakeOne(o.ctx, o.s, o.key, o.base, 0)
	if err != nil {
		o.t.Fatal(err)
	}
	return r.Remaining
}

// spend takes n units, every one admitted.
func (o *overrides) spend(n int) {
	o.t.Helper()
	for range n {
		if r, err := TakeOne(o.ctx, o.s, o.key, o.base, 1); err != nil || !r.Allowed {
			o.t.Fatalf("under the override: %+v %v", r, err)
		}
	}
}

// testOverrides checks per-key overrides.
func testOverrides(t *testing.T, newStore Factory) {
	o := newOverrides(t, newStore)
	o.take()
	o.take()
	if r := o.take(); r.Allowed {
		t.Fatalf("over the base limit: %+v", r)
	}
	// A temporary raise for this key.
	o.set(core.Override{Limit: core.PerMinute(100), Until: o.clock.Now().Add(10 * time.Second)})
	if r := o.take(); !r.Allowed || r.Capacity != 100 {
		t.Fatalf("raised: %+v", r)
	}
	if r, _ := TakeOne(o.ctx, o.s, core.Key{Identity: o.key.Identity + "-other", Policy: o.key.Policy}, o.base, 1); r.Capacity != 2 {
		t.Fatalf("an override is for one key: %+v", r)
	}
	o.blocked()
	o.clock.Advance(6 * time.Second)
	if r := o.take(); r.Allowed {
		t.Fatalf("after the block, the base limit again (its quota was used): %+v", r)
	}
	if err := o.s.ClearOverride(o.ctx, o.key); err != nil {
		t.Fatal(err)
	}
	if err := o.s.SetOverride(o.ctx, o.key, core.Override{Limit: core.PerMinute(5), Until: o.clock.Now().Add(-time.Second)}); err == nil {
		t.Fatal("an override that already ended is rejected")
	}
	if err := o.s.SetOverride(o.ctx, o.key, core.Override{Limit: core.PerMinute(-5), Until: o.clock.Now().Add(time.Second)}); err == nil {
		t.Fatal("an invalid override limit is rejected")
	}
}

// blocked: a block, which wins over everything until it ends, and denies
// the group of an op of the key. The key's own state, drained, decides
// after it: one request comes back 30 s after the drain, the whole quota
// a minute after it, not when the block ends.
func (o *overrides) blocked() {
	t := o.t
	o.set(core.Override{Until: o.clock.Now().Add(5 * time.Second)})
	if r := o.take(); r.Allowed || r.RetryAfter != 30*time.Second || r.ResetAfter != time.Minute || r.State != core.Throttled {
		t.Fatalf("blocked: %+v", r)
	}
	out := make([]core.Result, 2)
	other := Key(t)
	err := o.s.Take(o.ctx, []core.Op{{Key: other, Limit: o.base, Cost: 1}, {Key: o.key, Limit: o.base, Cost: 1}}, out)
	if err != nil || out[1].Allowed || !out[0].Allowed {
		t.Fatalf("a blocked op denies its group: %+v %v", out, err)
	}
	if r, _ := TakeOne(o.ctx, o.s, other, o.base, 0); r.Remaining != 2 {
		t.Fatalf("the group consumed nothing: %+v", r)
	}
}

// testOverridesIdempotent checks that setting the override already in
// force (the same Limit and Until) keeps its state, as N instances
// applying one rule set, or one restarting, do; another Limit or Until
// starts the override afresh.
func testOverridesIdempotent(t *testing.T, newStore Factory) {
	o := newOverrides(t, newStore)
	until := o.clock.Now().Add(time.Minute)
	for _, a := range []core.Algorithm{core.TokenBucket, core.FixedWindow, core.SlidingWindowLog} {
		until = o.setAgain(a, until)
	}
	// A block set twice stays a block, and lapses at its Until.
	block := core.Override{Until: o.clock.Now().Add(2 * time.Second)}
	o.set(block)
	o.set(block)
	if r, err := TakeOne(o.ctx, o.s, o.key, o.base, 1); err != nil || r.Allowed || r.RetryAfter != 2*time.Second {
		t.Fatalf("blocked: %+v %v", r, err)
	}
	// After a block, the same limit override as before starts afresh.
	o.set(core.Override{Limit: core.PerHour(11), Until: until})
	if got := o.remaining(); got != 11 {
		t.Fatalf("an override replacing a block starts afresh: remaining %d, want 11", got)
	}
	o.spend(2)
	// Cleared and set again: afresh.
	if err := o.s.ClearOverride(o.ctx, o.key); err != nil {
		t.Fatal(err)
	}
	o.set(core.Override{Limit: core.PerHour(11), Until: until})
	if got := o.remaining(); got != 11 {
		t.Fatalf("an override set after a clear starts afresh: remaining %d, want 11", got)
	}
}

// setAgain: an override of algorithm a set again as it is keeps its
// count; with another Until or Limit it starts afresh. It returns the
// Until it set last.
func (o *overrides) setAgain(a core.Algorithm, until time.Time) time.Time {
	t := o.t
	raise := core.PerHour(10).WithAlgorithm(a)
	o.set(core.Override{Limit: raise, Until: until})
	o.spend(3)
	if got := o.remaining(); got != 7 {
		t.Fatalf("%v: remaining after 3 of 10: %d", a, got)
	}
	o.set(core.Override{Limit: raise, Until: until})
	if got := o.remaining(); got != 7 {
		t.Fatalf("%v: the same override set again must keep its count: remaining %d, want 7", a, got)
	}
	// Another Until: a new override, counted afresh.
	until = until.Add(time.Second)
	o.set(core.Override{Limit: raise, Until: until})
	if got := o.remaining(); got != 10 {
		t.Fatalf("%v: another Until starts afresh: remaining %d, want 10", a, got)
	}
	o.spend(3)
	// Another Limit: afresh too.
	o.set(core.Override{Limit: core.PerHour(11).WithAlgorithm(a), Until: until})
	if got := o.remaining(); got != 11 {
		t.Fatalf("%v: another Limit starts afresh: remaining %d, want 11", a, got)
	}
	return until
}
