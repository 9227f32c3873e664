package envoyrls_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/envoyrls"
	"github.com/sluicehq/sluice/service/internal/traffic"
	"github.com/sluicehq/sluice/service/rules"
)

// A ShouldRateLimit of one or two descriptors makes five allocations: one
// block for its descriptors, their entries, the response, its statuses and
// its header fields, and the engine's four (the counter's identity, the
// statuses, the decision's results, the text of the header fields);
// allowed or denied (a Retry-After more), with a descriptor of an
// unlimited rule beside. With an observer (ratelimitd always has its
// metrics) the engine makes a sixth, the descriptors' identities it tells
// the observers; counting the decisions for the admin page's traffic adds
// none beyond it.
func TestShouldRateLimitAllocations(t *testing.T) {
	t.Run("engine", func(t *testing.T) { shouldRateLimitAllocations(t, benchServer(t), 0) })
	t.Run("observed", func(t *testing.T) {
		shouldRateLimitAllocations(t, envoyrls.New(memoryEngine(t, enRules(nil), engine.WithObserver(nopObserver{}))), 1)
	})
	t.Run("traffic counted", func(t *testing.T) {
		rec := traffic.NewRecorder()
		shouldRateLimitAllocations(t, envoyrls.New(memoryEngine(t, enRules(nil), engine.WithObserver(rec))), 1)
		now := time.Now()
		rec.Tick(now)
		require.GreaterOrEqual(t, rec.Instance(now.Add(time.Second)).Hour.Total(), int64(3*199), "every decision counted")
	})
}

// nopObserver observes nothing.
type nopObserver struct{}

func (nopObserver) Decided(context.Context, *engine.Event) {}
func (nopObserver) Reloaded(*rules.Snapshot, error)        {}

// shouldRateLimitAllocations holds s's ShouldRateLimit to 5 allocations,
// plus extra.
func shouldRateLimitAllocations(t *testing.T, s *envoyrls.Server, extra float64) {
	ctx := context.Background()
	n := 0
	for _, c := range []struct {
		name   string
		req    func() *rlsv3.RateLimitRequest
		allocs float64
	}{
		{"one descriptor", func() *rlsv3.RateLimitRequest {
			n++
			return req(desc("remote_address", "10.9."+strconv.Itoa(n/256%256)+"."+strconv.Itoa(n%256)))
		}, 5},
		{"one denied", func() *rlsv3.RateLimitRequest { return req(desc("remote_address", "10.8.0.1")) }, 5},
		{"two of three entries", func() *rlsv3.RateLimitRequest {
			n++
			return req(desc("path", "/api", "user", "u"+strconv.Itoa(n)), desc("client", "internal"))
		}, 5},
	} {
		reqs := make([]*rlsv3.RateLimitRequest, 200)
		for i := range reqs {
			reqs[i] = c.req()
		}
		resps := make([]*rlsv3.RateLimitResponse, len(reqs))
		errs := make([]error, len(reqs))
		i := 0
		got := testing.AllocsPerRun(len(reqs)-1, func() {
			resps[i], errs[i] = s.ShouldRateLimit(ctx, reqs[i])
			i++
		})
		for j := range i {
			require.NoError(t, errs[j])
			require.NotEmpty(t, resps[j].GetResponseHeadersToAdd(), c.name)
		}
		require.Equal(t, c.allocs+extra, got, c.name)
	}
}

func req(ds ...*rlcommon.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ds}
}
