package core

import (
	"fmt"
	"math/bits"
	"time"

	"github.com/sluicehq/sluice/internal/exact"
)

// Algorithm selects how a Limit counts. The zero value is not an algorithm:
// the constructors PerSecond, PerMinute, PerHour and Per choose TokenBucket.
type Algorithm uint8

// The six algorithms. TokenBucket, LeakyBucket and GCRA are three views of one
// meter (a bucket of capacity Burst refilled, or drained, at Rate per Period):
// given the same Limit they admit exactly the same requests and report the same
// Result. FixedWindow, SlidingWindowLog and SlidingWindowCounter count at most
// Rate events per Period and ignore Burst. Package algo documents each precisely.
const (
	TokenBucket Algorithm = iota + 1
	LeakyBucket
	FixedWindow
	SlidingWindowLog
	SlidingWindowCounter
	GCRA
)

var algorithmNames = [...]string{
	TokenBucket:          "token_bucket",
	LeakyBucket:          "leaky_bucket",
	FixedWindow:          "fixed_window",
	SlidingWindowLog:     "sliding_window_log",
	SlidingWindowCounter: "sliding_window_counter",
	GCRA:                 "gcra",
}

// String returns the snake_case name used in config files and metrics.
func (a Algorithm) String() string {
	if a.Valid() {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// Valid reports whether a is one of the six algorithms.
func (a Algorithm) Valid() bool { return a >= TokenBucket && a <= GCRA }

// AlgorithmNames returns the names of the six algorithms, in the order of
// their constants: the names String gives, ParseAlgorithm reads and every
// file, API and form of sluice and ratelimitd accepts. It returns a fresh
// slice on each call.
func AlgorithmNames() []string {
	out := make([]string, 0, len(algorithmNames)-1)
	for a := TokenBucket; a <= GCRA; a++ {
		out = append(out, algorithmNames[a])
	}
	return out
}

// ParseAlgorithm returns the Algorithm whose String is name, or an error
// wrapping ErrInvalidLimit whose *FieldError names "Algorithm".
func ParseAlgorithm(name string) (Algorithm, error) {
	for a := TokenBucket; a <= GCRA; a++ {
		if algorithmNames[a] == name {
			return a, nil
		}
	}
	return 0, fmt.Errorf("%s: %w", ErrInvalidLimit, invalidField(ErrInvalidLimit, "Algorithm", "unknown algorithm %q", name))
}

// Bucket reports whether a is one of the bucket algorithms (TokenBucket,
// LeakyBucket, GCRA), which have a Burst capacity.
func (a Algorithm) Bucket() bool { return a == TokenBucket || a == LeakyBucket || a == GCRA }

// Bounds that keep every product the algorithms compute exact in a float64
// (the number type of Redis Lua), so the memory and Redis stores agree.
const (
	// MaxRate bounds Rate and Burst.
	MaxRate = int64(1_000_000_000_000)
	// MaxLogRate bounds Rate for SlidingWindowLog, which keeps one entry per
	// admitted request of the last Period.
	MaxLogRate = int64(1) << 16
	// MaxCounterRate bounds Rate for SlidingWindowCounter, whose two counts
	// are packed into one stored integer.
	MaxCounterRate = int64(1) << 20
)

// Limit says how many events a key may have: Rate events per Period sustained,
// with bursts up to Burst for the bucket algorithms.
//
// The zero value is invalid; build one with PerSecond, PerMinute, PerHour or
// Per, optionally refined with WithAlgorithm and WithBurst, or as a literal
// checked by Validate. Limit is a small value type: copy it freely.
type Limit struct {
	// Algorithm is how events are counted.
	Algorithm Algorithm
	// Rate is the number of events per Period (at least 1).
	Rate int64
	// Period is the length of the window or refill period: a whole number
	// of microseconds, at least one.
	Period time.Duration
	// Burst is the capacity of TokenBucket, LeakyBucket and GCRA: how many
	// events a fresh key may have at once. Zero means Rate. The window
	// algorithms have no burst: leave it zero (or equal to Rate).
	Burst int64
}

// Per returns a token-bucket Limit of rate events per period, burst rate.
func Per(rate int64, period time.Duration) Limit {
	return Limit{Algorithm: TokenBucket, Rate: rate, Period: period}
}

// PerSecond returns a token-bucket Limit of rate events per second.
func PerSecond(rate int64) Limit { return Per(rate, time.Second) }

// PerMinute returns a token-bucket Limit of rate events per minute.
func PerMinute(rate int64) Limit { return Per(rate, time.Minute) }

// PerHour returns a token-bucket Limit of rate events per hour.
func PerHour(rate int64) Limit { return Per(rate, time.Hour) }

// WithAlgorithm returns a copy of l that counts with a.
func (l Limit) WithAlgorithm(a Algorithm) Limit { l.Algorithm = a; return l }

// WithBurst returns a copy of l with capacity burst.
func (l Limit) WithBurst(burst int64) Limit { l.Burst = burst; return l }

// Capacity is the most events a fresh key admits at once: Burst (or Rate when
// Burst is zero) for the buckets, Rate for the windows.
func (l Limit) Capacity() int64 {
	if l.Algorithm.Bucket() && l.Burst > 0 {
		return l.Burst
	}
	return l.Rate
}

// String formats l as "100/1m0s token_bucket burst=150".
func (l Limit) String() string {
	s := fmt.Sprintf("%d/%s %s", l.Rate, l.Period, l.Algorithm)
	if l.Burst != 0 {
		s += fmt.Sprintf(" burst=%d", l.Burst)
	}
	return s
}

// Validate reports why l cannot be used, or nil: an error wrapping
// ErrInvalidLimit whose *FieldError (see errors.As) names the field
// ("Algorithm", "Rate", "Period" or "Burst") and says what is wrong with
// it; the error's text adds the whole limit.
func (l Limit) Validate() error {
	fe := l.check()
	if fe == nil {
		return nil
	}
	return fmt.Errorf("%s: %w (limit %s)", ErrInvalidLimit, fe, l)
}

// check is Validate's *FieldError, without the limit's text: that of the
// first check l fails.
func (l Limit) check() *FieldError {
	if i := l.failed(); i >= 0 {
		c := &limitChecks[i]
		return &FieldError{Field: c.field, Message: c.message(l), Err: ErrInvalidLimit}
	}
	return nil
}

// Validate's checks, in the order it makes them: every way a Limit is
// refused is one (tests derive their cases from them).
const (
	checkAlgorithm     = iota // not one of the six
	checkRateLow              // Rate < 1
	checkRateHigh             // Rate > MaxRate
	checkPeriodLow            // Period < 1µs
	checkPeriodMicros         // Period not whole µs
	checkBurstNegative        // Burst < 0
	checkBurstHigh            // a bucket's Burst > MaxRate
	checkBucketExact          // a bucket's capacity in its exact unit ≥ 2^53
	checkWindowBurst          // a window with a Burst other than 0 or Rate
	checkLogRate              // sliding_window_log's Rate > MaxLogRate
	checkCounterRate          // sliding_window_counter's Rate > MaxCounterRate
	checkCounterExact         // sliding_window_counter's Rate × Period ≥ 2^53
	numLimitChecks
)

// failed returns the first check l fails (the index of its limitChecks),
// or -1.
func (l Limit) failed() int {
	period := int64(l.Period / time.Microsecond)
	bucket := l.Algorithm.Bucket()
	switch {
	case !l.Algorithm.Valid():
		return checkAlgorithm
	case l.Rate < 1:
		return checkRateLow
	case l.Rate > MaxRate:
		return checkRateHigh
	case l.Period < time.Microsecond:
		return checkPeriodLow
	case l.Period%time.Microsecond != 0:
		return checkPeriodMicros
	case l.Burst < 0:
		return checkBurstNegative
	case bucket && l.Burst > MaxRate:
		return checkBurstHigh
	case bucket && overflows(uint64(l.Capacity()), uint64(period/exact.GCD(period, l.Rate))):
		return checkBucketExact
	case !bucket && l.Burst != 0 && l.Burst != l.Rate:
		return checkWindowBurst
	case l.Algorithm == SlidingWindowLog && l.Rate > MaxLogRate:
		return checkLogRate
	case l.Algorithm == SlidingWindowCounter && l.Rate > MaxCounterRate:
		return checkCounterRate
	case l.Algorithm == SlidingWindowCounter && overflows(uint64(l.Rate), uint64(period)):
		return checkCounterExact
	}
	return -1
}

// overflows reports whether a × b is beyond the exact range 2^53.
func overflows(a, b uint64) bool {
	hi, lo := bits.Mul64(a, b)
	return hi != 0 || lo > uint64(exact.Max)
}

// limitCheck is what a check of Validate says: the field it blames and
// what is wrong with it.
type limitCheck struct {
	field   string
	message func(l Limit) string
}

// limitChecks are the words of Validate's checks, by check.
var limitChecks = [numLimitChecks]limitCheck{
	checkAlgorithm: {"Algorithm", func(l Limit) string { return fmt.Sprintf("unknown algorithm %d", uint8(l.Algorithm)) }},
	checkRateLow:   {"Rate", func(l Limit) string { return fmt.Sprintf("must be at least 1, got %d", l.Rate) }},
	checkRateHigh:  {"Rate", func(l Limit) string { return fmt.Sprintf("must be at most %d, got %d", MaxRate, l.Rate) }},
	checkPeriodLow: {"Period", func(l Limit) string { return fmt.Sprintf("must be at least 1µs, got %s", l.Period) }},
	checkPeriodMicros: {"Period", func(l Limit) string {
		return fmt.Sprintf("must be a whole number of microseconds, got %s", l.Period)
	}},
	checkBurstNegative: {"Burst", func(l Limit) string { return fmt.Sprintf("must not be negative, got %d", l.Burst) }},
	checkBurstHigh:     {"Burst", func(l Limit) string { return fmt.Sprintf("must be at most %d, got %d", MaxRate, l.Burst) }},
	checkBucketExact: {"Burst", func(l Limit) string {
		return fmt.Sprintf("capacity %d × interval %s/%d overflows the exact range; lower Burst or Period", l.Capacity(), l.Period, l.Rate)
	}},
	checkWindowBurst: {"Burst", func(l Limit) string { return fmt.Sprintf("%s has no burst: leave it 0, got %d", l.Algorithm, l.Burst) }},
	checkLogRate: {"Rate", func(l Limit) string {
		return fmt.Sprintf("sliding_window_log keeps one entry per event: at most %d, got %d (use sliding_window_counter)", MaxLogRate, l.Rate)
	}},
	checkCounterRate: {"Rate", func(l Limit) string {
		return fmt.Sprintf("sliding_window_counter allows at most %d, got %d", MaxCounterRate, l.Rate)
	}},
	checkCounterExact: {"Period", func(Limit) string {
		return "Rate × Period in µs overflows the exact range 2^53; lower Rate or Period"
	}},
}
