package promlimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// BenchmarkDecided measures the Collector alone on a decision of two
// policies, from one goroutine and from all.
func BenchmarkDecided(b *testing.B) {
	c := newCollector(b)
	l := newLimiter(b, newMemory(b), c, policy("api", core.PerHour(1_000_000)), policy("burst", core.PerHour(1_000_000)))
	var d core.Decision
	ctx := context.Background()
	r := keyfunc.Static{}
	if err := l.Decide(ctx, r, core.Call{}, &d); err != nil {
		b.Fatal(err)
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c.Decided(ctx, r, &d, 3*time.Microsecond, nil)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				c.Decided(ctx, r, &d, 3*time.Microsecond, nil)
			}
		})
	})
}

// BenchmarkLimiter compares a limiter over a memorystore with and without
// the Collector (one policy), so the cost shows as a ratio to its peer.
func BenchmarkLimiter(b *testing.B) {
	c := newCollector(b)
	p := policy("api", core.PerHour(1_000_000_000))
	for _, bb := range []struct {
		name    string
		limiter *core.Limiter
	}{
		{"bare", func() *core.Limiter {
			l, err := core.NewLimiter(newMemory(b), []core.Policy{p})
			if err != nil {
				b.Fatal(err)
			}
			return l
		}()},
		{"observed", newLimiter(b, newMemory(b), c, p)},
	} {
		b.Run(bb.name, func(b *testing.B) {
			var d core.Decision
			ctx := context.Background()
			r := keyfunc.Static{}
			b.ReportAllocs()
			for b.Loop() {
				if err := bb.limiter.Decide(ctx, r, core.Call{}, &d); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
