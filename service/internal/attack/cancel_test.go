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
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/ratelimitv1"
)

const twoRules = `
rules:
  - name: short
    dimension: user
    algorithm: fixed_window
    rate: 50
    period: 1h
  - name: long
    dimension: user
    algorithm: sliding_window_log
    rate: 60
    period: 2h
`

// TestAttackCancelNeverHalf: callers cancel their calls at random moments
// (before, during and after the decision on a real redis-server); a call
// decides every counter it touches or none: the two rules of a check, the
// checks of an all-or-nothing batch, the descriptors of an Envoy request
// always show the same use afterwards.
func TestAttackCancelNeverHalf(t *testing.T) {
	ctx, cancelAll := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancelAll()
	addr := newRedis(t)
	s := startStack(t, redisStore(t, addr), twoRules)
	env := startStack(t, redisStore(t, addr), `
domain: edge
descriptors:
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 50}
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 50, algorithm: token_bucket}
`)
	r := rand.New(rand.NewPCG(7, 7))
	cancelled := 0
	// used reads the use of every counter of cs in one all-or-nothing peek:
	// one store call, so a cancelled call the store runs late (it may) is
	// seen whole or not at all.
	used := func(cs ...engine.Check) []int64 {
		for i := range cs {
			cs[i].Cost = 0
		}
		rs, errs := s.eng.CheckBatch(ctx, cs, true)
		var out []int64
		for i := range rs {
			require.NoError(t, errs[i])
			for _, p := range rs[i].Decision.Results {
				out = append(out, p.Capacity-p.Remaining)
			}
		}
		return out
	}
	for i := range 150 {
		delay := time.Duration(r.IntN(1500)) * time.Microsecond
		cctx, cancel := context.WithCancel(ctx)
		timer := time.AfterFunc(delay, cancel)
		var err error
		switch i % 3 {
		case 0: // one check, two rules
			user := fmt.Sprintf("c%d", i)
			_, err = s.native.CheckRateLimit(cctx, &ratelimitv1.CheckRequest{Dimension: "user", Identifier: user, Cost: proto.Int64(3)})
			timer.Stop()
			cancel()
			u := used(engine.Check{Dimension: "user", Identifier: user})
			require.Len(t, u, 2)
			require.Equal(t, u[0], u[1], "check %d (cancel after %s, err %v): one rule charged, not the other", i, delay, err)
		case 1: // an all-or-nothing batch of two users
			a, b := fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)
			_, err = s.native.CheckRateLimitBatch(cctx, &ratelimitv1.BatchRequest{AllOrNothing: true, Checks: []*ratelimitv1.CheckRequest{
				{Dimension: "user", Identifier: a, Cost: proto.Int64(2), RuleId: "short"},
				{Dimension: "user", Identifier: b, Cost: proto.Int64(2), RuleId: "short"},
			}})
			timer.Stop()
			cancel()
			u := used(engine.Check{Dimension: "user", Identifier: a, Rule: "short"}, engine.Check{Dimension: "user", Identifier: b, Rule: "short"})
			require.Equal(t, u[0], u[1], "batch %d (cancel after %s, err %v): half decided", i, delay, err)
		case 2: // an Envoy request of two descriptors
			v := fmt.Sprintf("e%d", i)
			_, err = env.envoy.ShouldRateLimit(cctx, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 4, Descriptors: []*ratelimitv3.RateLimitDescriptor{
				{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "a", Value: v}}},
				{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "b", Value: v}}},
			}})
			timer.Stop()
			cancel()
			zero := wrapperspb.UInt64(0) // peek
			res, perr := env.envoy.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
				{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "a", Value: v}}, HitsAddend: zero},
				{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "b", Value: v}}, HitsAddend: zero},
			}})
			require.NoError(t, perr)
			ra, rb := res.GetStatuses()[0].GetLimitRemaining(), res.GetStatuses()[1].GetLimitRemaining()
			require.Contains(t, []uint32{46, 50}, ra, "request %d (cancel after %s, err %v)", i, delay, err)
			require.Equal(t, ra, rb, "request %d (cancel after %s, err %v): one descriptor charged, not the other", i, delay, err)
		}
		if err != nil {
			cancelled++
		}
	}
	t.Logf("%d of 150 calls ended cancelled", cancelled)
}
