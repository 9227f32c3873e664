package memorystore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
)

func BenchmarkTakeHotKey(b *testing.B) {
	for _, a := range []core.Algorithm{core.TokenBucket, core.FixedWindow, core.SlidingWindowCounter, core.SlidingWindowLog} {
		b.Run(a.String(), func(b *testing.B) {
			s, _ := memorystore.New()
			defer s.Close()
			l := core.PerSecond(1000).WithAlgorithm(a)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				take1(ctx, s, "hot-key", l, 1)
			}
		})
	}
}

func BenchmarkTake100kKeysParallel(b *testing.B) {
	s, _ := memorystore.New()
	defer s.Close()
	l := core.PerSecond(1000)
	ctx := context.Background()
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%d", i)
		take1(ctx, s, keys[i], l, 1)
	}
	var seed atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := rand.New(rand.NewPCG(seed.Add(1), 0)).IntN(len(keys))
		for pb.Next() {
			take1(ctx, s, keys[i], l, 1)
			if i++; i == len(keys) {
				i = 0
			}
		}
	})
}

func BenchmarkHeapPerKey(b *testing.B) {
	const n = 1_000_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%d", i)
	}
	ctx := context.Background()
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s, _ := memorystore.New(memorystore.WithMaxKeys(2 * n))
		for _, k := range keys {
			take1(ctx, s, k, core.PerSecond(1000), 1)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/key")
		runtime.KeepAlive(keys)
		s.Close()
	}
}

// take1 is a Take of one op, cost units of the identity key (no policy),
// reporting whether it was admitted: its op and result stay on the stack,
// and only what a caller reads of the Result is copied out.
func take1(ctx context.Context, s *memorystore.Store, key string, l core.Limit, cost int64) (bool, error) {
	ops := [1]core.Op{{Key: core.Key{Identity: key}, Limit: l, Cost: cost}}
	var out [1]core.Result
	err := s.Take(ctx, ops[:], out[:])
	return out[0].Allowed, err
}
