package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/lease"
	"github.com/sluicehq/sluice/core/memorystore"
)

// One hot key, decided by every CPU at once: from the lease layer's
// blocks, and, for comparison, by the memory store itself.
func BenchmarkHotKey(b *testing.B) {
	l := core.PerSecond(core.MaxRate).WithAlgorithm(core.FixedWindow)
	op := []core.Op{{Key: core.Key{Identity: "hot", Policy: "p"}, Limit: l, Cost: 1}}
	run := func(b *testing.B, s core.Store) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var out [1]core.Result
			for pb.Next() {
				if err := s.Take(context.Background(), op, out[:]); err != nil || !out[0].Allowed {
					b.Fatal(err, out[0])
				}
			}
		})
	}
	mem, err := memorystore.New()
	if err != nil {
		b.Fatal(err)
	}
	defer mem.Close()
	b.Run("memory", func(b *testing.B) { run(b, mem) })
	ls, err := lease.New(mem)
	if err != nil {
		b.Fatal(err)
	}
	defer ls.Close()
	op[0].Lease = 100 * time.Millisecond
	b.Run("leased", func(b *testing.B) {
		run(b, ls)
		st := ls.Stats()
		b.ReportMetric(float64(st.Takes)/float64(st.Local+st.Takes), "store-calls/op")
	})
}
