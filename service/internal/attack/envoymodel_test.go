package attack

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/service/engine"
)

// TestAttackEnvoyModel drives random Envoy requests (one to three
// descriptors over two rules and two values, repeated counters, per
// descriptor hits, negative hits) over real gRPC, on memory and Redis, and
// compares every overall code and admitted status with an exact model of
// the fixed windows: all or nothing over the positive descriptors (summed
// per counter, each status after the hits up to it), then refunds never
// below zero.
func TestAttackEnvoyModel(t *testing.T) {
	limits := map[string]int64{"a": 6, "b": 3}
	addr := newRedis(t)
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			// The windows are aligned on the hour: a frozen clock keeps
			// every check in one.
			store, now := frozenStore(t, backend, addr)
			s := startStack(t, store, `
domain: edge
descriptors:
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 6}
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 3}
`, engine.WithClock(now))
			used := map[[2]string]int64{}
			r := rand.New(rand.NewPCG(99, uint64(len(backend))))
			values := []string{"v1-" + backend, "v2-" + backend}
			for step := range 400 {
				n := 1 + r.IntN(3)
				type d struct {
					key, value string
					hits       int64
					neg        bool
				}
				ds := make([]d, n)
				req := &rlsv3.RateLimitRequest{Domain: "edge"}
				for i := range ds {
					ds[i] = d{key: []string{"a", "b"}[r.IntN(2)], value: values[r.IntN(2)], hits: int64(1 + r.IntN(3)), neg: r.IntN(5) == 0}
					req.Descriptors = append(req.Descriptors, &ratelimitv3.RateLimitDescriptor{
						Entries:        []*ratelimitv3.RateLimitDescriptor_Entry{{Key: ds[i].key, Value: ds[i].value}},
						HitsAddend:     wrapperspb.UInt64(uint64(ds[i].hits)),
						IsNegativeHits: ds[i].neg,
					})
				}
				resp, err := s.envoy.ShouldRateLimit(ctx, req)
				require.NoError(t, err)
				need := map[[2]string]int64{}
				for _, x := range ds {
					if !x.neg {
						need[[2]string{x.key, x.value}] += x.hits
					}
				}
				ok := true
				for k, h := range need {
					ok = ok && used[k]+h <= limits[k[0]]
				}
				// Each status is its counter when it was decided: a
				// positive one after the hits of the descriptors of its
				// counter up to it, in order, when the request was
				// admitted (what is left before the request when it was
				// not), a negative one after its own refund (in order).
				wantLeft := make([]int64, len(ds))
				upto := map[[2]string]int64{}
				for i, x := range ds {
					if !x.neg {
						k := [2]string{x.key, x.value}
						upto[k] += x.hits
						wantLeft[i] = limits[x.key] - used[k]
						if ok {
							wantLeft[i] -= upto[k]
						}
					}
				}
				if ok {
					for k, h := range need {
						used[k] += h
					}
				}
				for i, x := range ds {
					if x.neg {
						k := [2]string{x.key, x.value}
						used[k] = max(0, used[k]-min(x.hits, limits[x.key]))
						wantLeft[i] = limits[x.key] - used[k]
					}
				}
				where := fmt.Sprintf("step %d %+v", step, ds)
				want := rlsv3.RateLimitResponse_OVER_LIMIT
				if ok {
					want = rlsv3.RateLimitResponse_OK
				}
				require.Equal(t, want, resp.GetOverallCode(), where)
				if ok {
					for i := range ds {
						st := resp.GetStatuses()[i]
						require.Equal(t, rlsv3.RateLimitResponse_OK, st.GetCode(), where)
						require.Equal(t, uint32(wantLeft[i]), st.GetLimitRemaining(), "%s: descriptor %d remaining", where, i)
					}
				}
			}
		})
	}
}
