package grpclimit_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/adapters/grpclimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// A server limits every method but reflection to 2 calls per minute per
// client IP (100 in a real service), with the same options given to both
// interceptors. A client on loopback sees its third call refused, with the
// rate-limit metadata and Retry-After.
func Example() {
	// A stopped clock keeps the output the same on every run; leave
	// WithClock out in a real program.
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	store, err := memorystore.New(memorystore.WithClock(func() time.Time { return now }))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	clientIP := keyfunc.IP() // the transport peer; keyfunc.TrustProxies behind a gateway
	limiter, err := core.NewLimiter(store, []core.Policy{{Name: "per-ip", Key: clientIP, Limit: core.PerMinute(2)}})
	if err != nil {
		log.Fatal(err)
	}
	opts := []grpclimit.Option{grpclimit.WithSkipMethods("/grpc.reflection.v1.ServerReflection/")}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(limiter, opts...)),
		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(limiter, opts...)),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	for range 3 {
		var header, trailer metadata.MD
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&header), grpc.Trailer(&trailer))
		md := metadata.Join(header, trailer)
		fmt.Println(status.Code(err), md.Get("ratelimit"), md.Get("retry-after"))
	}
	// Output:
	// OK ["per-ip";r=1;t=30] []
	// OK ["per-ip";r=0;t=30] []
	// ResourceExhausted ["per-ip";r=0;t=30] [30]
}

// What a client sees, shown by calling the interceptor by hand (a server
// puts the peer in the context).
func ExampleUnaryServerInterceptor() {
	store, _ := memorystore.New()
	defer store.Close()
	clientIP := keyfunc.IP()
	limiter, _ := core.NewLimiter(store, []core.Policy{{Name: "per-ip", Key: clientIP, Limit: core.PerMinute(2)}})
	intercept := grpclimit.UnaryServerInterceptor(limiter)

	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 51234}})
	info := &grpc.UnaryServerInfo{FullMethod: "/shop.Cart/Add"}
	handler := func(ctx context.Context, req any) (any, error) {
		d, _ := grpclimit.DecisionFrom(ctx)
		return fmt.Sprintf("added %v (%d left)", req, d.Bound().Remaining), nil
	}
	for _, item := range []string{"tea", "cake", "jam"} {
		resp, err := intercept(ctx, item, info, handler)
		if err == nil {
			fmt.Println(resp)
			continue
		}
		st := status.Convert(err)
		fmt.Println(st.Code())
		for _, d := range st.Details() {
			switch d := d.(type) {
			case *errdetails.RetryInfo:
				fmt.Println("retry in about", d.GetRetryDelay().AsDuration().Round(time.Second))
			case *errdetails.QuotaFailure:
				fmt.Println("violated", d.GetViolations()[0].GetSubject())
			case *errdetails.ErrorInfo:
				fmt.Println(d.GetReason(), d.GetDomain())
			}
		}
	}
	// Output:
	// added tea (1 left)
	// added cake (0 left)
	// ResourceExhausted
	// retry in about 30s
	// violated policy:per-ip
	// RATE_LIMIT_EXCEEDED sluice.dev
}

// A client stays under a provider's quota of 10 calls per second: a call
// over it fails locally with ResourceExhausted and is never sent.
func ExampleUnaryClientInterceptor() {
	store, _ := memorystore.New()
	defer store.Close()
	quota, _ := core.NewLimiter(store, []core.Policy{{Name: "provider", Key: keyfunc.Const("api.example.com"), Limit: core.PerSecond(10)}})
	conn, err := grpc.NewClient("dns:///api.example.com:443",
		grpc.WithTransportCredentials(insecure.NewCredentials()), // TLS in real life
		grpc.WithChainUnaryInterceptor(grpclimit.UnaryClientInterceptor(quota)),
		grpc.WithChainStreamInterceptor(grpclimit.StreamClientInterceptor(quota)),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
}
