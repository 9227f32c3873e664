package envoyrls_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// denyRules is an Envoy-format rules file with ban lists
// (requests_per_unit: 0), in domain "bans".
func denyRules(*testing.T) string { return filepath.Join("testdata", "envoy-deny", "rules.yaml") }

// TestENAcceptsTheDenyFile: envoyproxy/ratelimit's own config checker
// accepts the file with requests_per_unit: 0 that ratelimitd serves below.
func TestENAcceptsTheDenyFile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, tool(t, "config_check_cmd"), "-config_dir", filepath.Dir(denyRules(t))).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "all rate limit configs ok")
}

// TestDenyRule: ShouldRateLimit over real gRPC under an Envoy file with
// Deny rules, on the memory store and a real redis-server: a descriptor
// reaching requests_per_unit: 0 makes the request OVER_LIMIT, stated as 0
// per minute until the minute ends, and no other descriptor of it takes
// anything; in shadow_mode it denies nothing; a rule that replaces it
// lifts it.
func TestDenyRule(t *testing.T) {
	t.Run("memory", func(t *testing.T) { testDenyRule(t, start(t, denyRules(t))) })
	t.Run("redis", func(t *testing.T) { testDenyRule(t, startOnRedis(t, denyRules(t))) })
}

func testDenyRule(t *testing.T, r *rig) {
	request := func(ds ...*rlcommon.RateLimitDescriptor) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: "bans", Descriptors: ds}
	}
	banned := func() *rlcommon.RateLimitDescriptor { return desc("remote_address", "198.51.100.66") }
	other := desc("remote_address", "192.0.2.1")
	perAddr := r.ruleID(t, "bans", "remote_address", "192.0.2.1")
	require.Equal(t, "banned-address", r.ruleID(t, "bans", "remote_address", "198.51.100.66"))

	for i := range 3 {
		before := time.Now()
		res := r.call(t, request(banned(), other))
		took := time.Since(before)
		require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, res.GetOverallCode(), "request %d", i+1)
		st := res.GetStatuses()[0]
		require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, st.GetCode())
		require.Equal(t, "banned-address", st.GetCurrentLimit().GetName())
		require.Zero(t, st.GetCurrentLimit().GetRequestsPerUnit())
		require.Equal(t, rlsv3.RateLimitResponse_RateLimit_MINUTE, st.GetCurrentLimit().GetUnit())
		require.Zero(t, st.GetLimitRemaining())
		// Until the end of the current minute, on the epoch's minutes, in
		// whole seconds rounded up (as envoyproxy/ratelimit states it).
		wait := st.GetDurationUntilReset().AsDuration()
		require.Positive(t, wait)
		require.LessOrEqual(t, wait, time.Minute)
		require.Zero(t, wait%time.Second, "%s is not whole seconds", wait)
		end := before.Add(wait)
		minuteEnd := before.Truncate(time.Minute).Add(time.Minute)
		require.GreaterOrEqual(t, end.Sub(minuteEnd), -took-time.Millisecond, "the ban ends at %s, before the minute does", end)
		require.Less(t, end.Sub(minuteEnd), time.Second, "the ban ends at %s, not at the end of a minute", end)
		// The other descriptor is stated, and took nothing.
		require.Equal(t, rlsv3.RateLimitResponse_OK, res.GetStatuses()[1].GetCode())
		require.Equal(t, perAddr, res.GetStatuses()[1].GetCurrentLimit().GetName())
		require.Equal(t, uint32(5), res.GetStatuses()[1].GetLimitRemaining(), "a banned request took from another counter")
		// The headers state the ban, with a Retry-After within the minute.
		h := strings.Join(headers(res), "\n")
		require.Contains(t, h, `"banned-address";q=0;w=60`)
		require.Contains(t, h, `RateLimit: "banned-address";r=0;`)
		retry := ""
		for _, line := range headers(res) {
			if v, ok := strings.CutPrefix(line, "Retry-After: "); ok {
				retry = v
			}
		}
		secs, err := strconv.Atoi(retry)
		require.NoError(t, err, "Retry-After: %q in %s", retry, h)
		require.True(t, secs >= 1 && secs <= 60, "Retry-After: %d", secs)
	}
	// A peek (hits_addend 0) and negative hits are banned too.
	peek := request(banned())
	peek.HitsAddend = 0
	require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, r.call(t, peek).GetOverallCode())
	neg := banned()
	neg.HitsAddend, neg.IsNegativeHits = wrapperspb.UInt64(2), true
	require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, r.call(t, request(neg)).GetOverallCode())

	// The other address's counter is where no banned request left it.
	res := r.call(t, request(other))
	require.Equal(t, rlsv3.RateLimitResponse_OK, res.GetOverallCode())
	require.Equal(t, uint32(4), res.GetStatuses()[0].GetLimitRemaining())

	// In shadow_mode: reported as 0 per hour, OK, and the request counts.
	res = r.call(t, request(desc("user_agent", "crawler-9"), other))
	require.Equal(t, rlsv3.RateLimitResponse_OK, res.GetOverallCode())
	require.Equal(t, rlsv3.RateLimitResponse_OK, res.GetStatuses()[0].GetCode())
	require.Zero(t, res.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit())
	require.Equal(t, rlsv3.RateLimitResponse_RateLimit_HOUR, res.GetStatuses()[0].GetCurrentLimit().GetUnit())
	require.Equal(t, uint32(3), res.GetStatuses()[1].GetLimitRemaining())
	require.NotContains(t, strings.Join(headers(res), "\n"), "Retry-After")

	// An admin's rule replaces the ban.
	res = r.call(t, request(desc("role", "admin"), banned()))
	require.Equal(t, rlsv3.RateLimitResponse_OK, res.GetOverallCode())
	require.Nil(t, res.GetStatuses()[1].GetCurrentLimit())
	require.Equal(t, uint32(99), res.GetStatuses()[0].GetLimitRemaining())
}
