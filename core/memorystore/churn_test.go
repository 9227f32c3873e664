package memorystore_test

import (
	"context"
	"math/bits"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
)

// latencies is a log-linear histogram of durations in ns: 16 sub-buckets per
// power of two, so a quantile is off by at most 1/16.
type latencies struct {
	counts [64 * 16]int64
	n      int64
	max    int64
}

func (h *latencies) add(ns int64) {
	ns = max(ns, 1)
	h.n++
	h.max = max(h.max, ns)
	e := 63 - bits.LeadingZeros64(uint64(ns))
	sub := int64(0)
	if e >= 4 {
		sub = (ns >> (e - 4)) & 15
	} else {
		sub = (ns << (4 - e)) & 15
	}
	h.counts[e*16+int(sub)]++
}

// quantile returns the upper bound of the bucket holding quantile q.
func (h *latencies) quantile(q float64) time.Duration {
	want := int64(q * float64(h.n))
	seen := int64(0)
	for i, c := range h.counts {
		if seen += c; seen > want {
			e, sub := i/16, int64(i%16)
			return time.Duration(min((int64(1)<<e)+((sub+1)<<e)/16, h.max))
		}
	}
	return time.Duration(h.max)
}

// BenchmarkChurnHotKeyLatency times decisions on 1024
// existing hot keys while another goroutine inserts a stream of new keys
// that expire after 20 ms (millions of them over a run), with the sweeper
// on (its default interval) and off. It reports the hot decisions'
// p99/p999/max and the longest insert.
func BenchmarkChurnHotKeyLatency(b *testing.B) {
	for _, sweep := range []bool{true, false} {
		name := "sweeper=on"
		if !sweep {
			name = "sweeper=off"
		}
		b.Run(name, func(b *testing.B) {
			opts := []memorystore.Option{}
			if !sweep {
				opts = append(opts, memorystore.WithSweepInterval(0))
			}
			s, err := memorystore.New(opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			hotL := core.PerHour(1_000_000) // admitted, and alive all along
			hot := make([]string, 1024)
			for i := range hot {
				hot[i] = "hot:" + strconv.Itoa(i)
				take1(ctx, s, hot[i], hotL, 1)
			}
			churnL := core.Per(1, 20*time.Millisecond)
			var stop atomic.Bool
			var wg sync.WaitGroup
			var inserts, insertMax atomic.Int64
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, 0, 32)
				n, worst := int64(0), int64(0)
				for !stop.Load() {
					buf = strconv.AppendInt(append(buf[:0], "churn:"...), n, 10)
					t0 := time.Now()
					// The store hashes the key and keeps nothing of it.
					take1(ctx, s, unsafe.String(&buf[0], len(buf)), churnL, 1)
					worst = max(worst, int64(time.Since(t0)))
					n++
				}
				inserts.Store(n)
				insertMax.Store(worst)
			}()
			time.Sleep(200 * time.Millisecond) // let the churn fill the store
			var h latencies
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				t0 := time.Now()
				take1(ctx, s, hot[i&1023], hotL, 1)
				h.add(int64(time.Since(t0)))
			}
			b.StopTimer()
			stop.Store(true)
			wg.Wait()
			b.ReportMetric(float64(h.quantile(0.99).Nanoseconds()), "p99-ns")
			b.ReportMetric(float64(h.quantile(0.999).Nanoseconds()), "p999-ns")
			b.ReportMetric(float64(h.max), "max-ns")
			b.ReportMetric(float64(insertMax.Load()), "insert-max-ns")
			b.ReportMetric(float64(inserts.Load()), "churn-keys")
		})
	}
}
