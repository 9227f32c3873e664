package redisbench

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench/membench"
)

// Benchmark is the go test form of the scenario: b.N decisions in total,
// taken by Callers concurrent callers over Identities keys on srv, so ns/op
// is the inverse of the throughput. Besides ns/op, B/op and allocs/op (of
// this Go process, per decision) it reports decisions/s, p50-µs and p99-µs
// (latency of one decision as its caller saw it), client-µs/op and
// redis-µs/op (CPU time of this process, or of redis-benchmark, and of
// redis-server's main thread per decision) and cmds/roundtrip (how many
// commands the client sent per round trip: the pipeline depth). A Ceiling
// runs redis-benchmark with -n b.N instead; its ns/op is redis-benchmark's
// own throughput, and it is skipped if redis-benchmark is absent. The
// benchmark fails if any decision fails or is denied.
func Benchmark(b *testing.B, srv *Server, impl Impl) {
	ctx := context.Background()
	if impl.Kind == Ceiling {
		bin, err := FindBinary(BenchmarkEnv, "redis-benchmark")
		if err != nil {
			b.Skipf("skipping redis ceiling: %v", err)
		}
		s, err := RunCeiling(ctx, srv.Admin(), srv.Port, bin, impl, Callers, Identities, max(b.N, Callers), time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(1e9/s.PerSec, "ns/op")
		b.ReportMetric(s.PerSec, "decisions/s")
		report(b, s)
		return
	}
	b.ReportAllocs()
	s, err := Run(ctx, srv.Admin(), srv.Addr, impl, RunConfig{
		Callers: Callers, Keys: membench.Keys(Identities), N: int64(b.N),
		Start: b.ResetTimer, Stop: b.StopTimer,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(s.PerSec, "decisions/s")
	b.ReportMetric(float64(s.P50)/1e3, "p50-µs")
	b.ReportMetric(float64(s.P99)/1e3, "p99-µs")
	report(b, s)
}

func report(b *testing.B, s Sample) {
	if s.Decisions > 0 {
		b.ReportMetric(float64(s.ClientCPU)/1e3/float64(s.Decisions), "client-µs/op")
		b.ReportMetric(float64(s.ServerCPU)/1e3/float64(s.Decisions), "redis-µs/op")
	}
	if s.RoundTrips > 0 {
		b.ReportMetric(float64(s.Commands)/float64(s.RoundTrips), "cmds/roundtrip")
	}
}

// MemoryBenchmark is the go test form of the memory scenario: each iteration
// inserts Identities identities (b.N is usually 1) with impl configured to
// MemoryQuota, and reports the growth of redis-server's used_memory per
// identity as bytes/identity and the Redis keys per identity as
// keys/identity. A Ceiling is skipped (it has no state of its own).
func MemoryBenchmark(b *testing.B, srv *Server, impl Impl, identities int) {
	if impl.Kind == Ceiling {
		b.Skip("a ceiling keeps no rate-limit state")
	}
	keys := membench.Keys(identities)
	var bytes, perKey float64
	for range b.N {
		s, err := RunMemory(context.Background(), srv.Admin(), srv.Addr, impl, Callers, keys)
		if err != nil {
			b.Fatal(err)
		}
		bytes += s.BytesPerIdentity()
		perKey += s.KeysPerIdentity()
	}
	b.ReportMetric(bytes/float64(b.N), "bytes/identity")
	b.ReportMetric(perKey/float64(b.N), "keys/identity")
}
