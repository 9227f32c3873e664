package grpcapi_test

import (
	"context"
	"strconv"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/grpcapi"
	"github.com/sluicehq/sluice/service/ratelimitv1"
	"github.com/sluicehq/sluice/service/rules"
)

// headerSink is the server side of a call made in process: it keeps the
// response header a handler sets, which gRPC would send.
type headerSink struct{ md metadata.MD }

func (h *headerSink) Method() string                  { return "/" + grpcapi.ServiceName + "/CheckRateLimit" }
func (h *headerSink) SetHeader(md metadata.MD) error  { h.md = md; return nil }
func (h *headerSink) SendHeader(md metadata.MD) error { h.md = md; return nil }
func (h *headerSink) SetTrailer(metadata.MD) error    { return nil }

// benchServer is the native API on a memory store under testRules.
func benchServer(b *testing.B) *grpcapi.Server {
	b.Helper()
	e, err := engine.New(context.Background(), memStore(b), rules.NewBytes("rules.yaml", []byte(testRules)))
	if err != nil {
		b.Fatal(err)
	}
	return grpcapi.New(e)
}

// BenchmarkHandlerCheckRateLimit is the server's share of one native
// check, in process: the request decoded from its wire bytes, the handler
// (the engine, its rate-limit metadata) and the response encoded, over
// 1024 identifiers; what gRPC's transport adds is not counted.
func BenchmarkHandlerCheckRateLimit(b *testing.B) {
	s := benchServer(b)
	wire := make([][]byte, 1024)
	for i := range wire {
		wire[i], _ = proto.Marshal(withCost(check("bench", "caller-"+strconv.Itoa(i)), 1))
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		sink := &headerSink{}
		ctx := grpc.NewContextWithServerTransportStream(context.Background(), sink)
		i := 0
		for pb.Next() {
			i++
			req := &ratelimitv1.CheckRequest{}
			if err := proto.Unmarshal(wire[i&1023], req); err != nil {
				b.Error(err)
				return
			}
			resp, err := s.CheckRateLimit(ctx, req)
			if err != nil || !resp.GetAllowed() {
				b.Errorf("%v %v", resp, err)
				return
			}
			if _, err := proto.Marshal(resp); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkHandlerBatch100 is BenchmarkHandlerCheckRateLimit for a
// CheckRateLimitBatch of 100 checks of 100 identifiers, decided one by one
// or all or nothing; decisions/s is 100 × ops/s.
func BenchmarkHandlerBatch100(b *testing.B) {
	for _, aon := range []bool{false, true} {
		b.Run("all_or_nothing="+strconv.FormatBool(aon), func(b *testing.B) {
			s := benchServer(b)
			wire := make([][]byte, 64)
			for g := range wire {
				req := &ratelimitv1.BatchRequest{AllOrNothing: aon}
				for k := range 100 {
					req.Checks = append(req.Checks, withCost(check("bench", "caller-"+strconv.Itoa(g*100+k)), 1))
				}
				wire[g], _ = proto.Marshal(req)
			}
			ctx := grpc.NewContextWithServerTransportStream(context.Background(), &headerSink{})
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				req := &ratelimitv1.BatchRequest{}
				if err := proto.Unmarshal(wire[i%len(wire)], req); err != nil {
					b.Fatal(err)
				}
				resp, err := s.CheckRateLimitBatch(ctx, req)
				if err != nil || len(resp.GetResults()) != 100 {
					b.Fatalf("%v %v", resp, err)
				}
				if _, err := proto.Marshal(resp); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(100*float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}
