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
				s := newStore(t, clock.Now)
				ctx := context.Background()
				id := Key(t).Identity
				other := id
				if !sameIdentity {
					other = id + "-other"
				}
				wide := core.PerMinute(5).WithAlgorithm(a)
				narrow := core.PerMinute(2).WithAlgorithm(a)
				ops := []core.Op{{Key: core.Key{Identity: id, Policy: "wide"}, Limit: wide, Cost: 1}, {Key: core.Key{Identity: other, Policy: "narrow"}, Limit: narrow, Cost: 1}}
				out := make([]core.Result, 2)
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
				peek, err := TakeOne(ctx, s, ops[0].Key, wide, 0)
				if err != nil || peek.Remaining != 3 {
					t.Fatalf("the wide policy leaked quota: %+v %v", peek, err)
				}
				// A shadow policy's denial does not deny the group.
				shadow := []core.Op{ops[0], {Key: ops[1].Key, Limit: narrow, Cost: 1, Shadow: true}}
				if err := s.Take(ctx, shadow, out); err != nil {
					t.Fatal(err)
				}
				if !out[0].Allowed || out[1].Allowed || out[0].Remaining != 2 {
					t.Fatalf("shadow denial: %+v", out)
				}
				// Refunds give back, never below fresh.
				at := out[0].At
				if at != clock.Now().UnixMicro() {
					t.Fatalf("Result.At %d, want the clock's %d", at, clock.Now().UnixMicro())
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
				clock.Advance(time.Hour)
				if err := s.Take(ctx, ops, out); err != nil || !out[0].Allowed || !out[1].Allowed {
					t.Fatalf("an hour later: %+v %v", out, err)
				}
				// Two ops of one Key are an error, and count nothing
				// (decided against one state, they admitted 6 of 5).
				k := Key(t)
				dup := []core.Op{{Key: k, Limit: wide, Cost: 3}, ops[0], {Key: k, Limit: wide, Cost: 3}}
				if err := s.Take(ctx, dup, make([]core.Result, 3)); !errors.Is(err, core.ErrInvalidCost) {
					t.Fatalf("a Take of two ops of one Key: %v, want an error wrapping ErrInvalidCost", err)
				}
				if r, err := TakeOne(ctx, s, k, wide, 0); err != nil || r.Remaining != 5 {
					t.Fatalf("a refused Take counted: %+v %v", r, err)
				}
			})
		}
	}
}
