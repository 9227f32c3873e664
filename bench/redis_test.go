package bench_test

import (
	"testing"

	"github.com/sluicehq/sluice/bench/redisbench"
)

// BenchmarkRedis64Callers: 64 concurrent callers on one local redis-server
// (started by the benchmark, skipped without redis-server), b.N decisions
// in total over 1000 identities; ns/op is the inverse of the throughput.
// One sub-benchmark per implementation, e.g.
// BenchmarkRedis64Callers/sluice-token_bucket, .../sluice-gcra-nopipe,
// .../ulule, .../redis_rate, .../evalsha, .../redis-benchmark-P16.
func BenchmarkRedis64Callers(b *testing.B) {
	srv := redisbench.StartServerTB(b)
	for _, impl := range redisbench.Impls() {
		b.Run(impl.Name, func(b *testing.B) { redisbench.Benchmark(b, srv, impl) })
	}
}
