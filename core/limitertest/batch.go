package limitertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
)

// testBatch checks all-or-nothing groups and refunds.
func testBatch(t *testing.T, newStore Factory) {
	for _, a := range Algorithms {
		for _, sameIdentity := range []bool{true, false} {
			name := a.String() + "/different-identities"
			if sameIdentity {
				name = a.String() + "/one-identity"
			}
			t.Run(name, func(t *testing.T) {
				clock := NewClock()
				b := &batch{ctx: context.Background(), t: t, s: newStore(t, clock.Now), clock: clock, out: make([]core.Result, 2)}
				id := Key(t).Identity
				other := id
				if !sameIdentity {
					other = id + "-other"
				}
				b.wide = core.PerMinute(5).WithAlgorithm(a)
				b.narrow = core.PerMinute(2).WithAlgorithm(a)
				b.ops = []core.Op{{Key: core.Key{Identity: id, Policy: "wide"}, Limit: b.wide, Cost: 1}, {Key: core.Key{Identity: other, Policy: "narrow"}, Limit: b.narrow, Cost: 1}}
				b.deniedWhole()
				b.refunds()
				b.duplicateKey()
			})
		}
	}
}

// batch is one case of testBatch: a group of two ops, one of a wide
// limit and one of a narrow one.
type batch struct {
	ctx          context.Context
	t            *testing.T
	s            core.Store
	clock        *Clock
	wide, narrow core.Limit
	ops          []core.Op
	out          []core.Result
}

// deniedWhole: the group is admitted twice, then the narrow limit denies
// it and the wide one consumes nothing; a shadow op's denial denies
// nothing.
func (b *batch) deniedWhole() {
	t, s, ctx, ops, out := b.t, b.s, b.ctx, b.ops, b.out
	for i := range 2 {
		if err := s.Take(ctx, ops, out); err != nil {
			t.Fatal(err)
		}
		if !out[0].Allowed || !out[1].Allowed {
			t.Fatalf("request %d: %+v", i, out)
		}
	}
	// The narrow policy denies: the wide one consumes nothing.
	if err := s.Take(ctx, ops, out); err != nil {
		t.Fatal(err)
	}
	if !out[0].Allowed || out[1].Allowed || out[0].Remaining != 3 || out[1].State != core.Throttled {
		t.Fatalf("denied group: %+v", out)
	}
	peek, err := TakeOne(ctx, s, ops[0].Key, b.wide, 0)
	if err != nil || peek.Remaining != 3 {
		t.Fatalf("the wide policy leaked quota: %+v %v", peek, err)
	}
	// A shadow policy's denial does not deny the group.
	shadow := []core.Op{ops[0], {Key: ops[1].Key, Limit: b.narrow, Cost: 1, Shadow: true}}
	if err := s.Take(ctx, shadow, out); err != nil {
		t.Fatal(err)
	}
	if !out[0].Allowed || out[1].Allowed || out[0].Remaining != 2 {
		t.Fatalf("shadow denial: %+v", out)
	}
}

// refunds: a refund of the last admission gives back, never below fresh
// (nor does one of a key never taken); an hour later the group passes.
func (b *batch) refunds() {
	t, s, ctx, ops, out, wide := b.t, b.s, b.ctx, b.ops, b.out, b.wide
	at := out[0].At
	if at != b.clock.Now().UnixMicro() {
		t.Fatalf("Result.At %d, want the clock's %d", at, b.clock.Now().UnixMicro())
	}
	if err := s.Refund(ctx, core.Admission{Key: ops[0].Key, Limit: wide, Cost: 1, At: at}); err != nil {
		t.Fatal(err)
	}
	if r, _ := TakeOne(ctx, s, ops[0].Key, wide, 0); r.Remaining != 3 {
		t.Fatalf("after a refund of 1: %+v", r)
	}
	if err := s.Refund(ctx, core.Admission{Key: ops[0].Key, Limit: wide, Cost: 100, At: at}); err != nil {
		t.Fatal(err)
	}
	if r, _ := TakeOne(ctx, s, ops[0].Key, wide, 0); r.Remaining != 5 || r.ResetAfter != 0 || r.State != core.Normal {
		t.Fatalf("after a refund of everything: %+v", r)
	}
	if err := s.Refund(ctx, core.Admission{Key: Key(t), Limit: wide, Cost: 3, At: at}); err != nil {
		t.Fatalf("refund of an unknown key: %v", err)
	}
	b.clock.Advance(time.Hour)
	if err := s.Take(ctx, ops, out); err != nil || !out[0].Allowed || !out[1].Allowed {
		t.Fatalf("an hour later: %+v %v", out, err)
	}
}

// duplicateKey: two ops of one Key are an error, and count nothing
// (decided against one state, they admitted 6 of 5).
func (b *batch) duplicateKey() {
	t, s, ctx, wide := b.t, b.s, b.ctx, b.wide
	k := Key(t)
	dup := []core.Op{{Key: k, Limit: wide, Cost: 3}, b.ops[0], {Key: k, Limit: wide, Cost: 3}}
	if err := s.Take(ctx, dup, make([]core.Result, 3)); !errors.Is(err, core.ErrInvalidCost) {
		t.Fatalf("a Take of two ops of one Key: %v, want an error wrapping ErrInvalidCost", err)
	}
	if r, err := TakeOne(ctx, s, k, wide, 0); err != nil || r.Remaining != 5 {
		t.Fatalf("a refused Take counted: %+v %v", r, err)
	}
}
