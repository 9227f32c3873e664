package algo_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/algo"
	"github.com/sluicehq/sluice/core/limitertest"
)

// must fails the test with the message when ok is false. Unlike require's
// assertions it costs nothing when ok holds (no t.Helper, no message), for
// the checks made on every step of the long random traces.
func must(t *testing.T, ok bool, format string, args ...any) {
	if !ok {
		t.Helper()
		t.Fatalf(format, args...)
	}
}

// lazy is a message built only when it is printed.
type lazy func() string

func (f lazy) String() string { return f() }

// clone returns a copy of the runner's key that shares nothing with it.
func (r *runner) clone() *runner {
	c := *r
	c.lg = algo.Log{At: slices.Clone(r.lg.At), N: slices.Clone(r.lg.N), State: r.lg.State}
	return &c
}

// checkWaits probes what r's key told a request of cost at now (res), each
// probe on a copy of the key that sees no other traffic: a denied request
// passes at exactly now + RetryAfter and at the Retry-After header's whole
// second, and not one µs earlier; the key is fresh at exactly now +
// ResetAfter (a request of the whole capacity passes) and not one µs
// earlier. It returns whether res was a denial it probed.
func checkWaits(t *testing.T, r *runner, now, cost int64, res core.Result, what func() string) bool {
	t.Helper()
	must(t, res.RetryAfter%time.Microsecond == 0 && res.ResetAfter%time.Microsecond == 0, "%s: waits in whole µs: %+v", lazy(what), res)
	capacity := r.sp.Capacity
	if reset := int64(res.ResetAfter / time.Microsecond); reset > 0 {
		got := r.clone().take(now+reset, capacity)
		must(t, got.Allowed, "%s: not fresh at now+ResetAfter (%s): %+v", lazy(what), res.ResetAfter, got)
		got = r.clone().take(now+reset-1, capacity)
		must(t, !got.Allowed, "%s: fresh 1µs before now+ResetAfter (%s): %+v", lazy(what), res.ResetAfter, got)
	}
	if res.Allowed || res.Never() {
		return false
	}
	retry := int64(res.RetryAfter / time.Microsecond)
	must(t, retry > 0, "%s: denied with retry after %s", lazy(what), res.RetryAfter)
	got := r.clone().take(now+retry, cost)
	must(t, got.Allowed, "%s: denied at now+RetryAfter (%s): %+v", lazy(what), res.RetryAfter, got)
	got = r.clone().take(now+retry-1, cost)
	must(t, !got.Allowed, "%s: admitted 1µs before now+RetryAfter (%s): %+v", lazy(what), res.RetryAfter, got)
	header := (res.RetryAfter + time.Second - 1) / time.Second // Retry-After: delay-seconds, rounded up
	got = r.clone().take(now+int64(header*time.Second/time.Microsecond), cost)
	must(t, got.Allowed, "%s: denied at Retry-After %d s: %+v", lazy(what), header, got)
	return true
}

// Every wait a step tells is exact, for all six algorithms: keys drained
// at random points of their windows by random costs, under random rates,
// periods and bursts, with the clock stepping forwards and backwards
// (buckets past the clamp of their TAT included). For every denial a
// request of the same cost passes at exactly now + RetryAfter (and at the
// Retry-After header's whole second) and is denied one µs earlier; every
// key is fresh at exactly now + ResetAfter and not one µs earlier. The
// decisions themselves are held to exact models by
// TestBucketsMatchExactModels and TestWindowsMatchModels.
func TestWaitsAreExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	probed, beyond := 0, 0
	for iter := range 40 {
		for _, a := range limitertest.Algorithms {
			l := limitertest.WaitLimit(rng, a)
			r := &runner{sp: algo.MustCompile(l)}
			P := int64(l.Period / time.Microsecond)
			step := max(P/max(l.Capacity(), 1), 1)
			now := int64(1_700_000_000_000_000) + rng.Int64N(P) // anywhere in a window
			for i := range 150 {
				switch rng.IntN(12) {
				case 0:
					now += rng.Int64N(2 * P)
				case 1:
					now -= rng.Int64N(step + 1) // a small step back
				case 2:
					now -= rng.Int64N(2*P + 1) // back across windows
				case 3:
					now -= rng.Int64N(30_000_000) // back by seconds: a large-rate bucket passes its clamp
				case 4, 5:
				default:
					now += rng.Int64N(step + 1)
				}
				cost := int64(1)
				switch rng.IntN(6) {
				case 0:
					cost = 1 + rng.Int64N(l.Capacity())
				case 1:
					cost = l.Capacity()
				}
				res := r.take(now, cost)
				what := func() string { return fmt.Sprintf("%s iter %d step %d: cost %d at %d", l, iter, i, cost, now) }
				if checkWaits(t, r, now, cost, res, what) {
					probed++
					if a.Bucket() && res.RetryAfter > 9*time.Second && l.Rate == 999_999_937 {
						beyond++
					}
				}
			}
		}
	}
	t.Logf("%d denials probed, %d of them buckets past the clamp", probed, beyond)
	require.Greater(t, probed, 5000)
	require.Positive(t, beyond, "the traces step buckets back past the clamp")
}
