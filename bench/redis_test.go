package bench_test

import (
	"strings"
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

// BenchmarkRedisMemoryPerKey: redis-server's used_memory growth per
// identity after 100k identities took one decision each, every
// implementation at 60 per hour; run it with -benchtime=1x.
func BenchmarkRedisMemoryPerKey(b *testing.B) {
	srv := redisbench.StartServerTB(b)
	for _, impl := range redisbench.Impls() {
		if impl.Kind == redisbench.Ceiling || strings.HasSuffix(impl.Name, "-nopipe") {
			continue
		}
		b.Run(impl.Name, func(b *testing.B) { redisbench.MemoryBenchmark(b, srv, impl, redisbench.MemoryIdentities) })
	}
}
