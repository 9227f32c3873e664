// Command grpc is sluice in a gRPC server: the standard health service
// (grpc.health.v1.Health), limited to 10 calls per minute per client IP, and
// server reflection, not limited, so that grpcurl can list and call it:
//
//	grpcurl -plaintext localhost:50051 list
//	grpcurl -plaintext -v localhost:50051 grpc.health.v1.Health/Check
//
// Every limited response carries the rate-limit metadata (ratelimit,
// ratelimit-policy, x-ratelimit-*); the 11th call in a minute ends with
// RESOURCE_EXHAUSTED, RetryInfo and grpc-retry-pushback-ms. The program in
// ./client calls Health/Check in a loop and prints all of it: with its retry
// service config (the default) a denied call is sent again after the
// pushback and succeeds; with -retry=false the denial is printed.
//
// It listens on $ADDR (default :50051) and keeps its counts in Redis at
// $REDIS_ADDR when set, in memory otherwise.
package main

import (
	"context"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/sluicehq/sluice/adapters/grpclimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/keyfunc"
)

func main() {
	store, name, closeStore := openStore()
	defer closeStore()
	// The transport peer. Behind a grpc-gateway or Envoy, which append to
	// x-forwarded-for, trust them: keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8")).
	clientIP := keyfunc.IP()
	limiter, err := core.NewLimiter(store, []core.Policy{{Name: "health", Key: clientIP, Limit: core.PerMinute(10)}})
	if err != nil {
		log.Fatal(err)
	}

	// No default limiter: only the health service is limited (Check, and
	// Watch when its stream opens); reflection passes.
	opts := []grpclimit.Option{grpclimit.WithMethodLimiter("/grpc.health.v1.Health/", limiter)}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(nil, opts...)),
		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(nil, opts...)),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer()) // "" is SERVING
	reflection.Register(srv)

	addr := os.Getenv("ADDR")
	if addr == "" {
		addr = ":50051"
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("sluice gRPC example listening on %s, store: %s", lis.Addr(), name)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		srv.GracefulStop()
	}()
	if err := srv.Serve(lis); err != nil {
		log.Print(err)
	}
}

func openStore() (core.Store, string, func()) {
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		s, err := redisstore.New(client)
		if err != nil {
			log.Fatal(err)
		}
		return s, "redis at " + addr, func() { _ = s.Close(); _ = client.Close() }
	}
	s, err := memorystore.New()
	if err != nil {
		log.Fatal(err)
	}
	return s, "memory", func() { _ = s.Close() }
}
