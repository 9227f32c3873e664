// Command grpcfloor is the floor of the service benchmark: a grpc-go server
// that answers Envoy's RateLimitService/ShouldRateLimit and sluice's
// RateLimitService/CheckRateLimit with a constant OK response built once at
// start, doing no work of its own per call. What it costs per check is what
// gRPC, HTTP/2 and protobuf cost with the server options ratelimitd uses
// (ServerOptions) and its garbage collector target
// (remotestore.DefaultGCPercent, unless GOGC is set); a rate-limit server
// can only add to it.
//
// Usage (the service benchmark builds and starts it; bound to loopback):
//
//	grpcfloor -grpc-addr 127.0.0.1:PORT [-pprof-addr 127.0.0.1:PORT] [-rate N]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/service/ratelimitv1"
	"github.com/sluicehq/sluice/service/remotestore"
)

// ServerOptions are the grpc.ServerOptions the floor's server runs with:
// the transport options `ratelimitd serve` gives its own gRPC server
// (service/cmd/ratelimitd serve.go) in the benchmark's configuration, taken
// from the same function, and ratelimitd's default stream workers
// (--grpc-stream-workers). ratelimitd also chains its metrics interceptor,
// which is its own work and not the floor's; its TLS credentials, keepalive
// parameters (--max-conn-age) and token interceptors (--grpc-auth) are off
// in the benchmark. TestServerOptionsInStep fails when ratelimitd's server
// starts using an option this list does not account for.
func ServerOptions() []grpc.ServerOption {
	return append(remotestore.ServerOptions(), grpc.NumStreamWorkers(remotestore.DefaultStreamWorkers))
}

// setGCPercent gives the floor ratelimitd's collector target, unless GOGC
// is set: gRPC's transport allocates in the floor as it does in ratelimitd,
// so at the same target it collects as often.
func setGCPercent(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(remotestore.DefaultGCPercent)
	}
}

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "grpcfloor:", err)
		os.Exit(1)
	}
}

func run(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("grpcfloor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	grpcAddr := fs.String("grpc-addr", "127.0.0.1:8081", "gRPC listen address")
	pprofAddr := fs.String("pprof-addr", "", "serve net/http/pprof on this address; empty: off")
	rate := fs.Int64("rate", 1_000_000, "the limit the constant answers report, per second")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 || *rate < 1 {
		return errors.New("usage: grpcfloor -grpc-addr HOST:PORT [-pprof-addr HOST:PORT] [-rate N>0]")
	}
	setGCPercent(os.Getenv)
	gl, err := net.Listen("tcp", *grpcAddr)
	if err != nil {
		return fmt.Errorf("-grpc-addr: %w", err)
	}
	gs := grpc.NewServer(ServerOptions()...)
	rlsv3.RegisterRateLimitServiceServer(gs, newEnvoyServer(*rate))
	ratelimitv1.RegisterRateLimitServiceServer(gs, newNativeServer(*rate))
	errc := make(chan error, 2)
	go func() { errc <- gs.Serve(gl) }()
	if *pprofAddr != "" {
		hs, err := startPprof(*pprofAddr, errc)
		if err != nil {
			gs.Stop()
			return err
		}
		defer hs.Close()
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	select {
	case <-sig:
		gs.Stop()
		return nil
	case err := <-errc:
		gs.Stop()
		return err
	}
}

// startPprof serves net/http/pprof's profile endpoints on addr.
func startPprof(addr string, errc chan<- error) (*http.Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-pprof-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := hs.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("pprof: %w", err)
		}
	}()
	return hs, nil
}

// envoyServer answers every ShouldRateLimit with one response built at
// start: OK, one descriptor status under rate per second (the shape of a
// real server's answer to the benchmark's one-descriptor requests).
type envoyServer struct {
	rlsv3.UnimplementedRateLimitServiceServer
	resp *rlsv3.RateLimitResponse
}

func newEnvoyServer(rate int64) *envoyServer {
	return &envoyServer{resp: &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
			Code:               rlsv3.RateLimitResponse_OK,
			CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: uint32(rate), Unit: rlsv3.RateLimitResponse_RateLimit_SECOND},
			LimitRemaining:     uint32(rate - 1),
			DurationUntilReset: durationpb.New(time.Second),
		}},
	}}
}

// ShouldRateLimit returns the constant response, whatever the request.
func (s *envoyServer) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return s.resp, nil
}

// nativeServer answers every CheckRateLimit with one response built at
// start: allowed, under rate per second, with the fields ratelimitd fills.
type nativeServer struct {
	ratelimitv1.UnimplementedRateLimitServiceServer
	resp *ratelimitv1.CheckResponse
}

func newNativeServer(rate int64) *nativeServer {
	return &nativeServer{resp: &ratelimitv1.CheckResponse{
		Allowed: true, Current: 1, Limit: rate, Remaining: rate - 1,
		ResetAt: timestamppb.New(time.Now().Add(time.Second)), State: ratelimitv1.State_STATE_NORMAL, Rule: "floor",
	}}
}

// CheckRateLimit returns the constant response, whatever the request.
func (s *nativeServer) CheckRateLimit(context.Context, *ratelimitv1.CheckRequest) (*ratelimitv1.CheckResponse, error) {
	return s.resp, nil
}
