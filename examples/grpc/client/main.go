// Command client calls grpc.health.v1.Health/Check on the gRPC example
// server in a loop and prints, for each call, the status, how long it took,
// the rate-limit metadata of the header and of the trailer, and the error
// details of a denial (RetryInfo, QuotaFailure, ErrorInfo). It is a plain
// gRPC client: nothing in it depends on sluice.
//
// Its service config (retryServiceConfig) retries RESOURCE_EXHAUSTED, so a
// call the server denies is sent again once the server's
// grpc-retry-pushback-ms has passed, and succeeds: the 11th call of a minute
// takes about 6 seconds instead of failing. With -retry=false every denial is
// printed instead.
//
//	go run ./grpc &
//	go run ./grpc/client -n 12
//	go run ./grpc/client -n 12 -retry=false
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// retryServiceConfig is the client's gRPC service config (gRFC A6): the
// health service's calls are retried when they end with RESOURCE_EXHAUSTED,
// up to 4 attempts in all. When the server sends grpc-retry-pushback-ms, as
// sluice does on a denial, grpc-go waits exactly that long before the next
// attempt instead of its own backoff; the backoff below is used only when a
// server sends no pushback. A pushback of -1 (a call that can never be
// admitted) stops the retries. The call's deadline bounds them all.
const retryServiceConfig = `{
  "methodConfig": [{
    "name": [{"service": "grpc.health.v1.Health"}],
    "retryPolicy": {
      "maxAttempts": 4,
      "initialBackoff": "0.5s",
      "maxBackoff": "10s",
      "backoffMultiplier": 2,
      "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]
    }
  }]
}`

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
	retry := flag.Bool("retry", true, "retry denied calls after the server's pushback")
	timeout := flag.Duration("timeout", 15*time.Second, "deadline of each call, retries included")
	flag.Parse()

	conn, err := dial(*addr, *retry)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	run(os.Stdout, healthpb.NewHealthClient(conn), *n, *service, *timeout)
}

// dial connects to addr, with retryServiceConfig when retry is set.
func dial(addr string, retry bool) (*grpc.ClientConn, error) {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if retry {
		opts = append(opts, grpc.WithDefaultServiceConfig(retryServiceConfig))
	} else {
		opts = append(opts, grpc.WithDisableRetry())
	}
	return grpc.NewClient(addr, opts...)
}

// run makes n Check calls, each within timeout, and prints what each got.
// The metadata and details are those of the last attempt of a call.
func run(w io.Writer, health healthpb.HealthClient, n int, service string, timeout time.Duration) {
	for i := 1; i <= n; i++ {
		var header, trailer metadata.MD
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		start := time.Now()
		resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: service}, grpc.Header(&header), grpc.Trailer(&trailer))
		took := time.Since(start).Round(time.Millisecond)
		cancel()
		st := status.Convert(err)
		if err == nil {
			fmt.Fprintf(w, "#%d %s %s in %s\n", i, st.Code(), resp.GetStatus(), took)
		} else {
			fmt.Fprintf(w, "#%d %s in %s: %s\n", i, st.Code(), took, st.Message())
		}
		printMetadata(w, "header ", header)
		printMetadata(w, "trailer", trailer)
		for _, d := range st.Details() {
			switch d := d.(type) {
			case *errdetails.RetryInfo:
				fmt.Fprintf(w, "   RetryInfo     retry_delay=%s\n", d.GetRetryDelay().AsDuration())
			case *errdetails.QuotaFailure:
				for _, v := range d.GetViolations() {
					fmt.Fprintf(w, "   QuotaFailure  %s: %s\n", v.GetSubject(), v.GetDescription())
				}
			case *errdetails.ErrorInfo:
				fmt.Fprintf(w, "   ErrorInfo     %s/%s %v\n", d.GetDomain(), d.GetReason(), d.GetMetadata())
			}
		}
	}
}

func printMetadata(w io.Writer, where string, md metadata.MD) {
	for _, k := range keys {
		for _, v := range md.Get(k) {
			fmt.Fprintf(w, "   %s %s: %s\n", where, k, v)
		}
	}
}
