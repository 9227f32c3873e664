package servicebench

import (
	"context"
	"errors"
	"testing"
)

// Conns is the number of gRPC connections the load generator opens to a
// server by default: four, as an Envoy with four worker threads keeps (one
// per worker and upstream host); its Callers concurrent streams are spread
// over them round robin. The HTTP JSON check opens one keep-alive
// connection per caller instead: HTTP/1.1 has one request in flight per
// connection.
const Conns = 4

// Benchmark is the go test form of the scenario: b.N calls in total by
// Callers callers over Identities users, on im's server from servers, so
// ns/op is the inverse of the calls' throughput. Besides ns/op it reports
// checks/s, p50-µs and p99-µs (one call as its caller saw it), and
// server-µs/check, redis-µs/check and loadgen-µs/check (CPU time of the
// server process, redis-server and this process per check). It fails if a
// call fails or a check is denied, and skips ratelimitd's implementations
// while the service module has no cmd/ratelimitd.
func Benchmark(b *testing.B, servers *Servers, im Impl) {
	ctx := context.Background()
	t, closeConns, err := servers.Target(ctx, im, Conns, Callers, Users(Identities))
	if errors.Is(err, ErrNoRatelimitd) {
		b.Skipf("skipping %s: %v", im.Name, err)
	}
	if err != nil {
		b.Fatal(err)
	}
	defer closeConns()
	s, err := Run(ctx, t, RunConfig{Callers: Callers, Users: Users(Identities), N: int64(b.N), Start: b.ResetTimer, Stop: b.StopTimer})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(s.PerSec, "checks/s")
	b.ReportMetric(float64(s.P50)/1e3, "p50-µs")
	b.ReportMetric(float64(s.P99)/1e3, "p99-µs")
	b.ReportMetric(s.PerCheck(s.ServerCPU), "server-µs/check")
	b.ReportMetric(s.PerCheck(s.RedisCPU), "redis-µs/check")
	b.ReportMetric(s.PerCheck(s.LoadCPU), "loadgen-µs/check")
}

// BenchmarkChurn is Benchmark of ChurnImpl, with its rules rewritten every
// ChurnInterval during the measured calls if churn is set (RunChurn). It
// also reports changes-written and changes-applied, and fails if a change
// was refused or none applied.
func BenchmarkChurn(b *testing.B, servers *Servers, churn bool) {
	ctx := context.Background()
	im := ChurnImpl()
	t, closeConns, err := servers.Target(ctx, im, Conns, Callers, Users(Identities))
	if errors.Is(err, ErrNoRatelimitd) {
		b.Skipf("skipping %s: %v", im.Name, err)
	}
	if err != nil {
		b.Fatal(err)
	}
	defer closeConns()
	cfg := RunConfig{Callers: Callers, Users: Users(Identities), N: int64(b.N), Start: b.ResetTimer, Stop: b.StopTimer}
	var s Sample
	var cr ChurnResult
	if churn {
		s, cr, err = RunChurn(ctx, t, cfg, ChurnInterval)
	} else {
		s, err = Run(ctx, t, cfg)
	}
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(s.PerSec, "checks/s")
	b.ReportMetric(float64(s.P50)/1e3, "p50-µs")
	b.ReportMetric(float64(s.P99)/1e3, "p99-µs")
	b.ReportMetric(s.PerCheck(s.ServerCPU), "server-µs/check")
	b.ReportMetric(float64(cr.Written), "changes-written")
	b.ReportMetric(float64(cr.Applied), "changes-applied")
}
