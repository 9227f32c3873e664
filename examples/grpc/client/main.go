// Command client calls grpc.health.v1.Health/Check on the gRPC example
// server in a loop and prints, for each call, the status, the rate-limit
// metadata of the header and of the trailer, and the error details of a
// denial (RetryInfo, QuotaFailure, ErrorInfo). It is a plain gRPC client:
// nothing in it depends on sluice.
//
//	go run ./grpc &
//	go run ./grpc/client -n 12
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// keys are the rate-limit metadata a sluice server sends, in print order.
var keys = []string{
	"ratelimit-policy", "ratelimit",
	"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "x-ratelimit-state",
	"retry-after", "grpc-retry-pushback-ms",
}

func main() {
	addr := flag.String("addr", "localhost:50051", "server address")
	n := flag.Int("n", 12, "number of calls")
	service := flag.String("service", "", "service name to check (\"\" is the whole server)")
	flag.Parse()

	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)

	for i := 1; i <= *n; i++ {
		var header, trailer metadata.MD
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: *service}, grpc.Header(&header), grpc.Trailer(&trailer))
		cancel()
		st := status.Convert(err)
		if err == nil {
			fmt.Printf("#%d %s %s\n", i, st.Code(), resp.GetStatus())
		} else {
			fmt.Printf("#%d %s: %s\n", i, st.Code(), st.Message())
		}
		printMetadata("header ", header)
		printMetadata("trailer", trailer)
		for _, d := range st.Details() {
			switch d := d.(type) {
			case *errdetails.RetryInfo:
				fmt.Printf("   RetryInfo     retry_delay=%s\n", d.GetRetryDelay().AsDuration())
			case *errdetails.QuotaFailure:
				for _, v := range d.GetViolations() {
					fmt.Printf("   QuotaFailure  %s: %s\n", v.GetSubject(), v.GetDescription())
				}
			case *errdetails.ErrorInfo:
				fmt.Printf("   ErrorInfo     %s/%s %v\n", d.GetDomain(), d.GetReason(), d.GetMetadata())
			}
		}
	}
}

func printMetadata(where string, md metadata.MD) {
	for _, k := range keys {
		for _, v := range md.Get(k) {
			fmt.Printf("   %s %s: %s\n", where, k, v)
		}
	}
}
