package grpcapi_test

import (
	"context"
	"fmt"
	"log"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/grpcapi"
	"github.com/sluicehq/sluice/service/ratelimitv1"
	"github.com/sluicehq/sluice/service/rules"
)

// Serve the native API on a loopback port and check a caller against a
// rule of 3 calls per minute per user: three are allowed, the fourth is
// denied (an answer, not an error).
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store, err := memorystore.New()
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	src := rules.NewBytes("rules.yaml", []byte(`rules:
  - name: orders-per-user
    dimension: user
    endpoints: [/api/orders]
    algorithm: sliding_window_log
    rate: 3
    period: 1m
`))
	eng, err := engine.New(ctx, store, src)
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = eng.Run(ctx) }()

	srv := grpc.NewServer()
	grpcapi.New(eng).Register(srv)
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
	client := ratelimitv1.NewRateLimitServiceClient(conn)
	for range 4 {
		r, err := client.CheckRateLimit(ctx, &ratelimitv1.CheckRequest{
			Dimension:  "user",
			Identifier: "alice",
			Endpoint:   "/api/orders",
			Cost:       proto.Int64(1),
		})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(r.GetAllowed(), r.GetRemaining(), r.GetState(), r.GetRule())
	}
	// Output:
	// true 2 STATE_NORMAL orders-per-user
	// true 1 STATE_NORMAL orders-per-user
	// true 0 STATE_WARNING orders-per-user
	// false 0 STATE_THROTTLED orders-per-user
}
