package envoyrls

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
)

func TestEnvoyLimitTable(t *testing.T) {
	const (
		sec   = rlsv3.RateLimitResponse_RateLimit_SECOND
		min   = rlsv3.RateLimitResponse_RateLimit_MINUTE
		hour  = rlsv3.RateLimitResponse_RateLimit_HOUR
		day   = rlsv3.RateLimitResponse_RateLimit_DAY
		week  = rlsv3.RateLimitResponse_RateLimit_WEEK
		month = rlsv3.RateLimitResponse_RateLimit_MONTH
		year  = rlsv3.RateLimitResponse_RateLimit_YEAR
	)
	for _, tc := range []struct {
		rate    int64
		period  time.Duration
		perUnit uint32
		unit    rlsv3.RateLimitResponse_RateLimit_Unit
	}{
		{10, time.Second, 10, sec},
		{10, time.Minute, 10, min},
		{10, time.Hour, 10, hour},
		{10, 24 * time.Hour, 10, day},
		{10, 7 * 24 * time.Hour, 10, week},
		{10, 30 * 24 * time.Hour, 10, month},
		{10, 365 * 24 * time.Hour, 10, year},
		{10, 30 * time.Second, 20, min},      // 10 per 30 s: 20 a minute
		{7, 45 * time.Second, 9, min},        // 9.33 rounded down
		{100, 90 * time.Minute, 66, hour},    // 66.7 rounded down
		{5, 500 * time.Millisecond, 10, sec}, // below a second: scaled up
		{10, 7 * time.Second, 1, sec},        // 7s is nearer a second (7×) than a minute (8.6×)
		{10, 8 * time.Second, 75, min},       // 8s is nearer a minute (7.5×) than a second (8×)
		{1, 48 * time.Hour, 3, week},         // 0.5 per DAY would state 0: the next unit states 3.5 → 3
		{1, 2 * 365 * 24 * time.Hour, 1, year},
		{1_000_000_000_000, time.Millisecond, math.MaxUint32, sec}, // saturates
		{math.MaxUint32 + 1, time.Second, math.MaxUint32, sec},
		{1_000_000_000_000, 365 * 24 * time.Hour / 2, math.MaxUint32, year},
	} {
		n, u := EnvoyLimit(tc.rate, tc.period)
		require.Equal(t, tc.unit, u, "%d per %v", tc.rate, tc.period)
		require.Equal(t, tc.perUnit, n, "%d per %v", tc.rate, tc.period)
	}
	n, u := EnvoyLimit(0, time.Second)
	require.Equal(t, rlsv3.RateLimitResponse_RateLimit_UNKNOWN, u)
	require.Zero(t, n)
	n, u = EnvoyLimit(1, 0)
	require.Equal(t, rlsv3.RateLimitResponse_RateLimit_UNKNOWN, u)
	require.Zero(t, n)
}

// TestEnvoyLimitNeverOverstates: the stated count per unit never exceeds the
// rule's average rate over that unit (perUnit/unit ≤ rate/period), except for
// the documented floor of 1 per YEAR, and it states at least 1.
func TestEnvoyLimitNeverOverstates(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	size := map[rlsv3.RateLimitResponse_RateLimit_Unit]time.Duration{}
	for _, u := range units {
		size[u.unit] = u.size
	}
	for range 20000 {
		rate := rng.Int64N(1_000_000) + 1
		period := time.Duration(rng.Int64N(int64(400 * 24 * time.Hour)))
		if rng.IntN(2) == 0 {
			period = time.Duration(rng.Int64N(int64(10*time.Minute))) + 1
		}
		if period <= 0 {
			period = 1
		}
		n, u := EnvoyLimit(rate, period)
		require.GreaterOrEqual(t, n, uint32(1), "%d per %v", rate, period)
		stated := new(big.Int).Mul(big.NewInt(int64(n)), big.NewInt(int64(period)))
		actual := new(big.Int).Mul(big.NewInt(rate), big.NewInt(int64(size[u])))
		if !(n == 1 && u == rlsv3.RateLimitResponse_RateLimit_YEAR) {
			require.LessOrEqual(t, stated.Cmp(actual), 0, "%d per %v stated as %d per %v", rate, period, n, u)
		}
	}
}
