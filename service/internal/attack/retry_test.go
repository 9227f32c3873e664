package attack

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/ratelimitv1"
)

// TestAttackRetryAfterPasses: a caller denied and told to wait (native
// retry_after, the HTTP API's retry_after and Retry-After, Envoy's
// duration_until_reset) passes when it retries after exactly that wait,
// for each algorithm, on memory and Redis. The stores and engines decide
// on one explicit clock that the caller moves by the wait it was told: the
// retry is at exactly that wait, however long the machine takes.
func TestAttackRetryAfterPasses(t *testing.T) {
	addr := newRedis(t)
	for _, algorithm := range algorithms {
		for _, backend := range []string{"memory", "redis"} {
			t.Run(algorithm+"/"+backend, func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				clock := limitertest.NewClock() // ahead of Redis's own clock, which expires the keys
				mk := func() core.Store {
					if backend == "memory" {
						return memStore(t, memorystore.WithClock(clock.Now))
					}
					return redisStore(t, addr, redisstore.WithClock(clock.Now))
				}
				wait := clock.Advance
				native := startStack(t, mk(), fmt.Sprintf(`
rules:
  - name: one
    dimension: user
    algorithm: %s
    rate: 2
    period: 1s
`, algorithm), engine.WithClock(clock.Now))
				envoy := startStack(t, mk(), fmt.Sprintf(`
domain: edge
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: %s}
`, algorithm), engine.WithClock(clock.Now))
				user := "retry-" + algorithm + "-" + backend
				t.Run("native", func(t *testing.T) {
					check := func() *ratelimitv1.CheckResponse {
						r, err := native.native.CheckRateLimit(ctx, &ratelimitv1.CheckRequest{Dimension: "user", Identifier: user + "-n", Cost: proto.Int64(1)})
						require.NoError(t, err)
						return r
					}
					for range 2 {
						var r *ratelimitv1.CheckResponse
						for range 10 {
							if r = check(); !r.GetAllowed() {
								break
							}
						}
						require.False(t, r.GetAllowed())
						d := r.GetRetryAfter().AsDuration()
						require.Positive(t, d)
						require.LessOrEqual(t, d, 2*time.Second)
						wait(d)
						require.True(t, check().GetAllowed(), "denied again after retry_after %s", d)
					}
				})
				t.Run("http", func(t *testing.T) {
					body := map[string]any{"key_type": "user", "key_value": user + "-h"}
					for range 2 {
						var out map[string]any
						for range 10 {
							code, o := native.httpCheck(t, body)
							require.Equal(t, http.StatusOK, code)
							if out = o; out["allowed"] == false {
								break
							}
						}
						require.Equal(t, false, out["allowed"])
						secs, ok := out["retry_after"].(float64)
						require.True(t, ok, "%v", out)
						d := time.Duration(secs * float64(time.Second))
						require.Positive(t, d)
						wait(d)
						code, o := native.httpCheck(t, body)
						require.Equal(t, http.StatusOK, code)
						require.Equal(t, true, o["allowed"], "denied again after retry_after %s", d)
					}
					// Status mode: the Retry-After header (whole seconds) is at least the wait.
					status := func() *http.Response {
						req, err := http.NewRequestWithContext(ctx, http.MethodGet, native.http+"/api/v1/rate-limit/check?mode=status&key_type=user&key_value="+user+"-s", nil)
						require.NoError(t, err)
						resp, err := http.DefaultClient.Do(req)
						require.NoError(t, err)
						resp.Body.Close()
						return resp
					}
					var resp *http.Response
					for range 10 {
						if resp = status(); resp.StatusCode != http.StatusOK {
							break
						}
					}
					require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
					secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
					require.NoError(t, err, "Retry-After %q", resp.Header.Get("Retry-After"))
					require.Positive(t, secs)
					wait(time.Duration(secs) * time.Second)
					require.Equal(t, http.StatusOK, status().StatusCode, "denied again after Retry-After %d", secs)
				})
				t.Run("envoy", func(t *testing.T) {
					req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: user}}}}}
					for range 2 {
						var r *rlsv3.RateLimitResponse
						for range 10 {
							var err error
							r, err = envoy.envoy.ShouldRateLimit(ctx, req)
							require.NoError(t, err)
							if r.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
								break
							}
						}
						require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, r.GetOverallCode())
						d := r.GetStatuses()[0].GetDurationUntilReset().AsDuration()
						require.Positive(t, d)
						require.LessOrEqual(t, d, 2*time.Second)
						wait(d)
						r, err := envoy.envoy.ShouldRateLimit(ctx, req)
						require.NoError(t, err)
						require.Equal(t, rlsv3.RateLimitResponse_OK, r.GetOverallCode(), "denied again after duration_until_reset %s", d)
					}
				})
			})
		}
	}
}
