package envoyrls

import (
	"math"
	"math/bits"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// envoyUnit is one of the calendar units Envoy's RateLimit.Unit can name, with
// the length envoyproxy/ratelimit gives it (a month is 30 days, a year 365).
type envoyUnit struct {
	unit rlsv3.RateLimitResponse_RateLimit_Unit
	size time.Duration
}

// units are Envoy's units, shortest first.
var units = [...]envoyUnit{
	{rlsv3.RateLimitResponse_RateLimit_SECOND, time.Second},
	{rlsv3.RateLimitResponse_RateLimit_MINUTE, time.Minute},
	{rlsv3.RateLimitResponse_RateLimit_HOUR, time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_DAY, 24 * time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_WEEK, 7 * 24 * time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_MONTH, 30 * 24 * time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_YEAR, 365 * 24 * time.Hour},
}

// EnvoyLimit states rate events per period in Envoy's terms: a count per
// calendar unit, which is all RateLimit.Unit can express (it has no
// multiplier).
//
// A period equal to a unit is reported as it is (10 per minute: 10 per
// MINUTE). Any other period is reported in the nearest unit (nearest by
// ratio: 30s is 2× from a minute and 30× from a second, so MINUTE) with the
// count scaled to it and rounded down, so that Envoy never states more than
// the rule lets through on average: 10 per 30s is 20 per MINUTE, 7 per 45s is
// 9 per MINUTE (9.33 rounded down), 100 per 90m is 66 per HOUR. When rounding
// down would state 0 (1 per 2 days is 0.5 per DAY) the next larger unit that
// states at least 1 is used instead (3 per WEEK); a limit slower than 1 per
// YEAR is stated as 1 per YEAR, the least Envoy can say. A count above
// Envoy's uint32 saturates at math.MaxUint32. A rate or period below 1 gives
// UNKNOWN and 0.
func EnvoyLimit(rate int64, period time.Duration) (perUnit uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit) {
	if rate < 1 || period <= 0 {
		return 0, rlsv3.RateLimitResponse_RateLimit_UNKNOWN
	}
	for _, u := range units {
		if period == u.size {
			return clampUint32(rate), u.unit
		}
	}
	// The nearest unit by ratio: the first unit whose size is at least the
	// period, or the one before it when that is nearer (size/period >
	// period/prev, i.e. size*prev > period²).
	i := len(units) - 1
	for j, u := range units {
		if u.size >= period {
			i = j
			if j > 0 && less128(uint64(period), uint64(period), uint64(u.size), uint64(units[j-1].size)) {
				i = j - 1
			}
			break
		}
	}
	for ; i < len(units); i++ {
		// rate * size / period, rounded down, in exact 128-bit arithmetic.
		hi, lo := bits.Mul64(uint64(rate), uint64(units[i].size))
		if hi >= uint64(period) {
			return math.MaxUint32, units[i].unit // the quotient needs more than 64 bits
		}
		n, _ := bits.Div64(hi, lo, uint64(period))
		if n > 0 {
			return uint32(min(n, math.MaxUint32)), units[i].unit
		}
	}
	return 1, rlsv3.RateLimitResponse_RateLimit_YEAR
}

// less128 reports whether a*b < c*d, computed exactly.
func less128(a, b, c, d uint64) bool {
	h1, l1 := bits.Mul64(a, b)
	h2, l2 := bits.Mul64(c, d)
	return h1 < h2 || h1 == h2 && l1 < l2
}

// clampUint32 returns n within [0, math.MaxUint32].
func clampUint32(n int64) uint32 {
	switch {
	case n <= 0:
		return 0
	case n > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(n)
}
