package envoyrls

import (
	"math"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rules"
)

// TestDescriptorStatus: the status of a decided descriptor, for periods
// Envoy's units cannot state, overrides, saturation and shadow rules.
func TestDescriptorStatus(t *testing.T) {
	rule := &rules.Rule{ID: "thirty", Limit: core.Limit{Algorithm: core.SlidingWindowCounter, Rate: 10, Period: 30 * time.Second}}
	pr := core.PolicyResult{Policy: "thirty", Limit: rule.Limit,
		Result: core.Result{Allowed: true, Capacity: 10, Remaining: 7, ResetAfter: 45 * time.Second}}
	got := new(statusBlock).fill(&engine.DescriptorResult{Rule: rule, Result: pr}, time.Time{})
	require.Equal(t, rlsv3.RateLimitResponse_OK, got.GetCode())
	require.Equal(t, "thirty", got.GetCurrentLimit().GetName())
	require.Equal(t, uint32(20), got.GetCurrentLimit().GetRequestsPerUnit(), "10 per 30s is 20 per minute")
	require.Equal(t, rlsv3.RateLimitResponse_RateLimit_MINUTE, got.GetCurrentLimit().GetUnit())
	require.Equal(t, uint32(7), got.GetLimitRemaining())
	require.Equal(t, 45*time.Second, got.GetDurationUntilReset().AsDuration())

	// An override's limit, which core states as the result's Limit, is the
	// one stated.
	over := core.PerHour(7200)
	pr.Limit, pr.Capacity, pr.Applied = over, over.Capacity(), &over
	pr.Remaining = 1 << 40 // saturates
	got = new(statusBlock).fill(&engine.DescriptorResult{Rule: rule, Result: pr}, time.Time{})
	require.Equal(t, uint32(7200), got.GetCurrentLimit().GetRequestsPerUnit())
	require.Equal(t, rlsv3.RateLimitResponse_RateLimit_HOUR, got.GetCurrentLimit().GetUnit())
	require.Equal(t, uint32(math.MaxUint32), got.GetLimitRemaining())

	// Denied: OVER_LIMIT with nothing remaining; in shadow, OK.
	pr.Limit, pr.Capacity, pr.Applied, pr.Allowed, pr.Remaining = rule.Limit, 10, nil, false, 0
	got = new(statusBlock).fill(&engine.DescriptorResult{Rule: rule, Result: pr}, time.Time{})
	require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, got.GetCode())
	pr.Shadow = true
	got = new(statusBlock).fill(&engine.DescriptorResult{Rule: rule, Result: pr}, time.Time{})
	require.Equal(t, rlsv3.RateLimitResponse_OK, got.GetCode())
	require.Zero(t, got.GetLimitRemaining())
}

// TestDenyStatus: a Deny rule (requests_per_unit: 0) is OVER_LIMIT, stated
// as 0 per its unit, until the end of the unit's window; OK in shadow.
func TestDenyStatus(t *testing.T) {
	rule := &rules.Rule{ID: "banned", Deny: true, Limit: core.Limit{Algorithm: core.FixedWindow, Period: time.Minute}}
	now := time.Unix(1_800_000_045, 0)
	got := new(statusBlock).fill(&engine.DescriptorResult{Rule: rule}, now)
	require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, got.GetCode())
	require.Equal(t, "banned", got.GetCurrentLimit().GetName())
	require.Zero(t, got.GetCurrentLimit().GetRequestsPerUnit())
	require.Equal(t, rlsv3.RateLimitResponse_RateLimit_MINUTE, got.GetCurrentLimit().GetUnit())
	require.Zero(t, got.GetLimitRemaining())
	require.Equal(t, 15*time.Second, got.GetDurationUntilReset().AsDuration())
	rule.Shadow = true
	got = new(statusBlock).fill(&engine.DescriptorResult{Rule: rule}, now)
	require.Equal(t, rlsv3.RateLimitResponse_OK, got.GetCode())

	// The overall code follows a denying status even if the decision says
	// allowed.
	s := New(nil)
	rule.Shadow = false
	res := s.response(&engine.DescriptorsResult{Allowed: true, Statuses: []engine.DescriptorResult{{Rule: rule}, {}}}, new(callMemory))
	require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, res.GetOverallCode())
	require.Equal(t, rlsv3.RateLimitResponse_OK, res.GetStatuses()[1].GetCode())
}
