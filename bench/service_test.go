package bench_test

import (
	"testing"

	"github.com/sluicehq/sluice/bench/redisbench"
	"github.com/sluicehq/sluice/bench/servicebench"
)

// BenchmarkService: ratelimitd and envoyproxy/ratelimit (installed into the
// cache directory on first use) as processes on one local redis-server,
// answering ShouldRateLimit from 64 callers over 1000 users, b.N calls in
// total; ns/op is the inverse of the calls' throughput. One sub-benchmark
// per implementation, e.g. BenchmarkService/envoy-ratelimit,
// .../ratelimitd-redis, .../ratelimitd-memory.
func BenchmarkService(b *testing.B) {
	srv := redisbench.StartServerTB(b)
	dir, err := servicebench.CacheDir()
	if err != nil {
		b.Fatal(err)
	}
	servers := &servicebench.Servers{Redis: srv, GoCommand: servicebench.GoCommand(), CacheDir: dir, ServiceDir: "../service", Log: b.Output()}
	defer servers.Close()
	for _, im := range servicebench.Impls() {
		b.Run(im.Name, func(b *testing.B) { servicebench.Benchmark(b, servers, im) })
	}
}
