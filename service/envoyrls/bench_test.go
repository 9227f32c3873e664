package envoyrls_test

import (
	"context"
	"net"
	"strconv"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/service/envoyrls"
)

func benchServer(b testing.TB) *envoyrls.Server {
	b.Helper()
	e := memoryEngine(b, enRules(nil))
	return envoyrls.New(e)
}

// benchRequests are requests of two descriptors (an address and a nested
// path/user), over many addresses so that few are denied.
func benchRequests() []*rlsv3.RateLimitRequest {
	reqs := make([]*rlsv3.RateLimitRequest, 4096)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{
			desc("remote_address", "10.0."+strconv.Itoa(i/256)+"."+strconv.Itoa(i%256)),
			desc("path", "/api", "user", "u"+strconv.Itoa(i)),
		}}
	}
	return reqs
}

// BenchmarkShouldRateLimit: the front door and the engine in process
// (memory store), no network.
func BenchmarkShouldRateLimit(b *testing.B) {
	s := benchServer(b)
	reqs := benchRequests()
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := s.ShouldRateLimit(ctx, reqs[i%len(reqs)]); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}

// BenchmarkShouldRateLimitGRPC: the same over real gRPC on loopback.
func BenchmarkShouldRateLimitGRPC(b *testing.B) {
	s := benchServer(b)
	g := grpc.NewServer()
	s.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	b.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	client := rlsv3.NewRateLimitServiceClient(conn)
	reqs := benchRequests()
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := client.ShouldRateLimit(ctx, reqs[i%len(reqs)]); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}

// BenchmarkShouldRateLimitOne is the server's share of a request of one
// descriptor (remote_address, over 4096 addresses), in process: decoded
// from its wire bytes, decided, and the response encoded.
func BenchmarkShouldRateLimitOne(b *testing.B) {
	s := benchServer(b)
	wire := make([][]byte, 4096)
	for i := range wire {
		wire[i], _ = proto.Marshal(&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{
			desc("remote_address", "10.1."+strconv.Itoa(i/256)+"."+strconv.Itoa(i%256)),
		}})
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			req := &rlsv3.RateLimitRequest{}
			if err := proto.Unmarshal(wire[i%len(wire)], req); err != nil {
				b.Error(err)
				return
			}
			resp, err := s.ShouldRateLimit(ctx, req)
			if err != nil {
				b.Error(err)
				return
			}
			if _, err := proto.Marshal(resp); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
