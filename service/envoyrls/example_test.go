package envoyrls_test

import (
	"context"
	"fmt"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/envoyrls"
	"github.com/sluicehq/sluice/service/rules"
)

// An envoyproxy/ratelimit rules file served by ratelimitd: 2 per minute per
// remote address. The third request is over limit. In ratelimitd the
// Server is registered on its gRPC server (Register) and its JSONHandler
// serves /json.
func Example() {
	ctx := context.Background()
	st, err := memorystore.New(memorystore.WithClock(func() time.Time { return time.Unix(1_800_000_030, 0) }))
	if err != nil {
		panic(err)
	}
	defer st.Close()
	e, err := engine.New(ctx, st, rules.NewBytes("envoy.yaml", []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 2
`)))
	if err != nil {
		panic(err)
	}
	srv := envoyrls.New(e)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{{
		Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "203.0.113.7"}},
	}}}
	for range 3 {
		res, err := srv.ShouldRateLimit(ctx, req)
		if err != nil {
			panic(err)
		}
		s := res.GetStatuses()[0]
		fmt.Println(res.GetOverallCode(), s.GetCurrentLimit().GetRequestsPerUnit(), s.GetCurrentLimit().GetUnit(),
			s.GetLimitRemaining(), s.GetDurationUntilReset().AsDuration())
	}
	// Output:
	// OK 2 MINUTE 1 30s
	// OK 2 MINUTE 0 30s
	// OVER_LIMIT 2 MINUTE 0 30s
}

// Envoy's units have no multiplier: a period that is not one is stated in
// the nearest unit, the count scaled and rounded down.
func ExampleEnvoyLimit() {
	for _, l := range []struct {
		rate   int64
		period time.Duration
	}{{10, time.Minute}, {10, 30 * time.Second}, {7, 45 * time.Second}, {100, 90 * time.Minute}, {1, 48 * time.Hour}} {
		n, unit := envoyrls.EnvoyLimit(l.rate, l.period)
		fmt.Printf("%d per %v: %d per %v\n", l.rate, l.period, n, unit)
	}
	// Output:
	// 10 per 1m0s: 10 per MINUTE
	// 10 per 30s: 20 per MINUTE
	// 7 per 45s: 9 per MINUTE
	// 100 per 1h30m0s: 66 per HOUR
	// 1 per 48h0m0s: 3 per WEEK
}
