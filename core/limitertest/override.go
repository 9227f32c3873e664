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
	// A block, which wins over everything until it ends.
	if err := s.SetOverride(ctx, key, core.Override{Until: clock.Now().Add(5 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if r := take(); r.Allowed || r.RetryAfter != 5*time.Second || r.State != core.Throttled {
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
