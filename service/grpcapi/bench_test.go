package grpcapi_test

import (
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/service/grpcapi"
	"github.com/sluicehq/sluice/service/ratelimitv1"
)

// BenchmarkCheckRateLimit: single checks over real gRPC on loopback, many
// callers in parallel, on the memory store (client, server and engine share
// the machine's cores); "nofields" without the rate-limit metadata.
func BenchmarkCheckRateLimit(b *testing.B) {
	b.Run("fields", func(b *testing.B) { benchmarkCheck(b) })
	b.Run("nofields", func(b *testing.B) { benchmarkCheck(b, grpcapi.WithoutHeaders()) })
}

// benchmarkCheck is BenchmarkCheckRateLimit with the server's options.
func benchmarkCheck(b *testing.B, opts ...grpcapi.Option) {
	h := start(b, memStore(b), opts...)
	ctx := callCtx(b)
	var n atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req := check("bench", "caller-"+strconv.FormatInt(n.Add(1), 10))
		for pb.Next() {
			r, err := h.client.CheckRateLimit(ctx, req)
			if err != nil || !r.GetAllowed() {
				b.Errorf("check: %v %v", r, err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "checks/s")
}

// BenchmarkCheckRateLimitBatch10: batches of 10 checks (10 identifiers),
// decided independently; checks/s counts checks, not calls.
func BenchmarkCheckRateLimitBatch10(b *testing.B) {
	h := start(b, memStore(b))
	ctx := callCtx(b)
	var n atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		g := strconv.FormatInt(n.Add(1), 10)
		req := &ratelimitv1.BatchRequest{}
		for i := range 10 {
			req.Checks = append(req.Checks, check("bench", "caller-"+g+"-"+strconv.Itoa(i)))
		}
		for pb.Next() {
			r, err := h.client.CheckRateLimitBatch(ctx, req)
			if err != nil || len(r.GetResults()) != 10 {
				b.Errorf("batch: %v %v", r, err)
				return
			}
		}
	})
	b.ReportMetric(10*float64(b.N)/b.Elapsed().Seconds(), "checks/s")
}
