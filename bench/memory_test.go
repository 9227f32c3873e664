package bench_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench/membench"
)

// BenchmarkHotKeySerial: one key, b.N decisions in one goroutine.
func BenchmarkHotKeySerial(b *testing.B) { membench.RunAll(b, membench.HotKeySerial) }

// BenchmarkHotKeyParallel: one key, b.N decisions from GOMAXPROCS goroutines.
func BenchmarkHotKeyParallel(b *testing.B) { membench.RunAll(b, membench.HotKeyParallel) }

// BenchmarkKeys100kSerial: 100k pre-warmed keys walked by one goroutine.
func BenchmarkKeys100kSerial(b *testing.B) { membench.RunAll(b, membench.Keys100kSerial) }

// BenchmarkKeys100kParallel: 100k pre-warmed keys walked by GOMAXPROCS
// goroutines, each from its own random offset.
func BenchmarkKeys100kParallel(b *testing.B) { membench.RunAll(b, membench.Keys100kParallel) }

// BenchmarkHeapPerKey: live heap per key after inserting 1M distinct keys;
// run it with -benchtime=1x.
func BenchmarkHeapPerKey(b *testing.B) { membench.RunAll(b, membench.HeapPerKey) }

// BenchmarkChurnLatency: hot-key decision latency (p99, p999, max) while
// short-lived keys churn, sweeper on and off; each iteration is a 2 s run.
func BenchmarkChurnLatency(b *testing.B) {
	for _, sweeper := range []bool{true, false} {
		b.Run(map[bool]string{true: "sweeper=on", false: "sweeper=off"}[sweeper], func(b *testing.B) {
			for b.Loop() {
				r, err := membench.Churn(2*time.Second, sweeper)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(r.P99.Nanoseconds()), "p99-ns")
				b.ReportMetric(float64(r.P999.Nanoseconds()), "p999-ns")
				b.ReportMetric(float64(r.Max.Nanoseconds()), "max-ns")
				b.ReportMetric(float64(r.ChurnKeys), "churn-keys")
			}
		})
	}
}
