package bench_test

import (
	"testing"

	"github.com/sluicehq/sluice/bench/redisbench"
	"github.com/sluicehq/sluice/bench/servicebench"
)

// BenchmarkService: ratelimitd, envoyproxy/ratelimit (installed into the
// cache directory on first use) and the grpc-go floor as processes on one
// local redis-server, answering 64 callers over 1000 users, b.N calls in
// total; ns/op is the inverse of the calls' throughput. One sub-benchmark
// per implementation of servicebench.Impls but the tuning variants, e.g.
// BenchmarkService/envoy-ratelimit-best, .../grpc-floor,
// .../ratelimitd-redis, .../ratelimitd-memory-http.
func BenchmarkService(b *testing.B) {
	srv := redisbench.StartServerTB(b)
	dir, err := servicebench.CacheDir()
	if err != nil {
		b.Fatal(err)
	}
	servers := &servicebench.Servers{Redis: srv, GoCommand: servicebench.GoCommand(), CacheDir: dir, ServiceDir: "../service", BenchDir: ".", Log: b.Output()}
	defer servers.Close()
	for _, im := range servicebench.Impls() {
		if im.Tuning {
			continue
		}
		b.Run(im.Name, func(b *testing.B) { servicebench.Benchmark(b, servers, im) })
	}
}

// BenchmarkServiceRuleChurn: ratelimitd on Redis (ratelimitd-redis of
// BenchmarkService) under the same load with its rules file rewritten every
// second (the measured rule's limit alternating between two values never
// reached) and with no change, b.N calls each. Besides BenchmarkService's
// metrics it reports the changes written and applied during the run.
func BenchmarkServiceRuleChurn(b *testing.B) {
	srv := redisbench.StartServerTB(b)
	servers := &servicebench.Servers{Redis: srv, GoCommand: servicebench.GoCommand(), ServiceDir: "../service", Log: b.Output()}
	defer servers.Close()
	for _, churn := range []bool{false, true} {
		name := "changes=none"
		if churn {
			name = "changes=1s"
		}
		b.Run(name, func(b *testing.B) { servicebench.BenchmarkChurn(b, servers, churn) })
	}
}
