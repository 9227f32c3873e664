package redisbench

import (
	"math"
	"math/bits"
	"time"
)

// subBits sub-buckets per power of two: a recorded value is reported with a
// relative error below 2^-subBits (1.6%), like an HDR histogram with two
// significant digits.
const subBits = 6

const histBuckets = (64 - subBits + 1) << subBits

// Histogram counts durations in log-linear buckets. It is fixed-size (no
// allocation when recording) and not safe for concurrent use: give each
// goroutine its own and Merge them.
type Histogram struct {
	counts [histBuckets]uint64
	n      uint64
	max    time.Duration
}

func bucketOf(v uint64) int {
	if v < 1<<subBits {
		return int(v)
	}
	shift := bits.Len64(v) - subBits - 1
	return shift<<subBits + int(v>>shift)
}

// bucketTop is the largest value that falls into bucket i.
func bucketTop(i int) uint64 {
	if i < 2<<subBits {
		return uint64(i)
	}
	shift := i>>subBits - 1
	mant := uint64(i - shift<<subBits)
	return (mant+1)<<shift - 1
}

// Record adds one duration (negative ones count as 0).
func (h *Histogram) Record(d time.Duration) {
	h.counts[bucketOf(uint64(max(d, 0)))]++
	h.n++
	h.max = max(h.max, d)
}

// Merge adds o's counts to h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// Count is the number of recorded durations.
func (h *Histogram) Count() uint64 { return h.n }

// Max is the largest recorded duration.
func (h *Histogram) Max() time.Duration { return h.max }

// Quantile returns the q-quantile (0 < q ≤ 1): the top of the bucket holding
// the ceil(q·n)-th smallest value, so at most 1.6% above the true value.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		if seen += c; seen >= rank {
			return min(time.Duration(bucketTop(i)), h.max)
		}
	}
	return h.max
}
