package grpcauth_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net"
	"os"
	"path/filepath"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/adminauth"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/grpcapi"
	"github.com/sluicehq/sluice/service/grpcauth"
	"github.com/sluicehq/sluice/service/ratelimitv1"
	"github.com/sluicehq/sluice/service/remotestore"
	"github.com/sluicehq/sluice/service/rules"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// The native API behind the interceptor: a check needs no token,
// ResetLimit needs a write token.
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, _ := os.MkdirTemp("", "grpcauth-example-")
	defer os.RemoveAll(dir)
	db, err := rulesdb.Open(ctx, "file:"+filepath.Join(dir, "rules.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	secret, _, _ := db.CreateToken(ctx, "cli:ops", "ops", rulesdb.ScopeWrite)

	store, _ := memorystore.New()
	defer store.Close()
	eng, err := engine.New(ctx, store, rules.NewBytes("rules.yaml", []byte(testRules)))
	if err != nil {
		log.Fatal(err)
	}
	auth, _ := adminauth.New(db, store, adminauth.Options{})
	ic, _ := grpcauth.New(func() *adminauth.Auth { return auth }, grpcauth.Options{Logger: slog.New(slog.DiscardHandler)})
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(ic.Unary()), grpc.ChainStreamInterceptor(ic.Stream()))
	grpcapi.New(eng).Register(srv)
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	conn, _ := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	client := ratelimitv1.NewRateLimitServiceClient(conn)
	r, err := client.CheckRateLimit(ctx, &ratelimitv1.CheckRequest{Dimension: "user", Identifier: "alice", Endpoint: "/api/orders", Cost: proto.Int64(1)})
	fmt.Println("check:", r.GetAllowed(), err)
	reset := &ratelimitv1.ResetRequest{Dimension: "user", Identifier: "alice", Endpoint: "/api/orders"}
	_, err = client.ResetLimit(ctx, reset)
	fmt.Println("reset without a token:", status.Code(err))
	// Over loopback the token may go in plaintext; elsewhere use TLS and
	// remotestore.TokenCredentials.
	_, err = client.ResetLimit(ctx, reset, grpc.PerRPCCredentials(remotestore.InsecureTokenCredentials(secret)))
	fmt.Println("reset with a write token:", status.Code(err))
	// Output:
	// check: true <nil>
	// reset without a token: Unauthenticated
	// reset with a write token: OK
}
