package attack

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// envoyLimit is an Envoy-format rules file of domain "edge": key "k" (any
// value) limited to rate per hour under algorithm.
func envoyLimit(algorithm string, rate int) string {
	return fmt.Sprintf(`
domain: edge
descriptors:
  - key: k
    rate_limit:
      unit: hour
      requests_per_unit: %d
      algorithm: %s
`, rate, algorithm)
}

func envoyReq(value string, hits uint64, negative bool) *rlsv3.RateLimitRequest {
	d := &ratelimitv3.RateLimitDescriptor{
		Entries:        []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: value}},
		HitsAddend:     wrapperspb.UInt64(hits),
		IsNegativeHits: negative,
	}
	return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}}
}

// TestAttackNegativeHitsBounded: is_negative_hits gives back at most what
// the counter took: negative hits on a fresh counter, or above what was
// taken, never let more than the limit through afterwards (each
// algorithm, memory and Redis).
func TestAttackNegativeHitsBounded(t *testing.T) {
	const rate = 10
	addr := newRedis(t)
	for _, algorithm := range algorithms {
		for _, backend := range []string{"memory", "redis"} {
			t.Run(algorithm+"/"+backend, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				store := memStore(t)
				if backend == "redis" {
					store = redisStore(t, addr)
				}
				s := startStack(t, store, envoyLimit(algorithm, rate))
				spendAll := func(value string, tries int) int {
					n := 0
					for range tries {
						r, err := s.envoy.ShouldRateLimit(ctx, envoyReq(value, 1, false))
						require.NoError(t, err)
						if r.GetOverallCode() == rlsv3.RateLimitResponse_OK {
							n++
						}
					}
					return n
				}
				// A fresh counter given 1000 hits back admits no more than its limit.
				fresh := "fresh-" + algorithm + "-" + backend
				for range 3 {
					r, err := s.envoy.ShouldRateLimit(ctx, envoyReq(fresh, 1000, true))
					require.NoError(t, err)
					require.Equal(t, rlsv3.RateLimitResponse_OK, r.GetOverallCode())
				}
				require.LessOrEqual(t, spendAll(fresh, 3*rate), rate, "negative hits on a fresh counter added room")

				// A spent counter given back more than it took admits at most what it took.
				spent := "spent-" + algorithm + "-" + backend
				require.Equal(t, rate, spendAll(spent, rate+2))
				r, err := s.envoy.ShouldRateLimit(ctx, envoyReq(spent, 3, true))
				require.NoError(t, err)
				require.Equal(t, rlsv3.RateLimitResponse_OK, r.GetOverallCode())
				require.LessOrEqual(t, spendAll(spent, 2*rate), 3, "3 hits given back admitted more than 3")
				_, err = s.envoy.ShouldRateLimit(ctx, envoyReq(spent, 1<<40, true))
				require.NoError(t, err)
				require.LessOrEqual(t, spendAll(spent, 3*rate), rate, "huge negative hits added room beyond the limit")
			})
		}
	}
}

// TestAttackEnvoyTwoInstances: concurrent ShouldRateLimit and /json
// callers on two instances on one redis-server, several descriptors per
// request all reaching one counter, never get more than the limit
// admitted (each algorithm).
func TestAttackEnvoyTwoInstances(t *testing.T) {
	const rate = 40
	addr := newRedis(t)
	for _, algorithm := range algorithms {
		t.Run(algorithm, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			yaml := envoyLimit(algorithm, rate)
			stacks := []*stack{startStack(t, redisStore(t, addr), yaml), startStack(t, redisStore(t, addr), yaml)}
			value := "shared-" + algorithm
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for i := range 8 {
				s := stacks[i%2]
				wg.Go(func() {
					for j := range 15 {
						req := envoyReq(value, 1, false)
						units := int64(1)
						if j%3 == 0 { // two descriptors of one counter: 2 units, all or nothing
							req.Descriptors = append(req.Descriptors, envoyReq(value, 1, false).Descriptors[0])
							units = 2
						}
						var ok bool
						if i%4 == 3 { // /json
							b, err := protojson.Marshal(req)
							if !assertNoErr(t, err) {
								return
							}
							code, body := s.post(t, "/json", "application/json", b)
							if code != http.StatusOK && code != http.StatusTooManyRequests {
								t.Errorf("/json %d %v", code, body)
								return
							}
							ok = code == http.StatusOK
						} else {
							r, err := s.envoy.ShouldRateLimit(ctx, req)
							if !assertNoErr(t, err) {
								return
							}
							ok = r.GetOverallCode() == rlsv3.RateLimitResponse_OK
						}
						if ok {
							admitted.Add(units)
						}
					}
				})
			}
			wg.Wait()
			require.LessOrEqual(t, admitted.Load(), int64(rate))
			require.GreaterOrEqual(t, admitted.Load(), int64(rate-1))
		})
	}
}
