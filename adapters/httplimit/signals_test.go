package httplimit_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/httplimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/sftest"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/ratelimitfields"
)

// advance moves the fixture's clock.
func (f *fixture) advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

// peekAt returns the remaining quota of the client at remote under l, d
// after the fixture's now, without counting anything.
func (f *fixture) peekAt(t *testing.T, l *core.Limiter, remote string, d time.Duration) int64 {
	t.Helper()
	f.advance(d)
	defer f.advance(-d)
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remote
	dec, err := l.Peek(t.Context(), httplimit.Request(r))
	require.NoError(t, err)
	return dec.Bound().Remaining
}

// firstInstant is the smallest d in (0, hi] (to the microsecond) for which
// ok(d) holds, or -1; ok must be monotone.
func firstInstant(hi time.Duration, ok func(time.Duration) bool) time.Duration {
	if !ok(hi) {
		return -1
	}
	lo := time.Duration(0) // ok(lo) false or lo == 0
	for hi-lo > time.Microsecond {
		mid := (lo + hi) / 2 / time.Microsecond * time.Microsecond
		if mid <= lo {
			mid = lo + time.Microsecond
		}
		if ok(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

func ceilSec(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

// TestTUntilMoreQuota: over random traces on each of the
// six algorithms, t of RateLimit is the time until more quota is available
// (draft-ietf-httpapi-ratelimit-headers-10), found independently by peeking
// at the store at later instants; X-RateLimit-Reset is until the quota is
// whole again; Retry-After is the wait for the denied request; t never
// exceeds w but for a sliding window counter's (whose quota can come back
// a window later than w: t is never earlier than it); and a request that
// can never pass gets neither t nor Retry-After.
func TestTUntilMoreQuota(t *testing.T) {
	const steps = 120
	for _, a := range []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.GCRA, core.FixedWindow, core.SlidingWindowLog, core.SlidingWindowCounter} {
		for _, lim := range []core.Limit{core.Per(10, time.Minute), core.Per(7, 50*time.Second).WithBurst(12)} {
			lim := lim.WithAlgorithm(a)
			if !a.Bucket() {
				lim.Burst = 0
			}
			t.Run(fmt.Sprintf("%s/%d per %s burst %d", a, lim.Rate, lim.Period, lim.Burst), func(t *testing.T) {
				f := newFixture(t)
				l := f.limiter(t, nil, ipPolicy(t, "p", lim))
				h := httplimit.New(l,
					httplimit.WithHeaders(ratelimitfields.Config{Reset: ratelimitfields.ResetDelta}),
					httplimit.WithCost(func(r *http.Request) int64 {
						c, _ := strconv.ParseInt(r.URL.Query().Get("cost"), 10, 64)
						return c
					}))(ok)
				capacity := lim.Capacity()
				rng := rand.New(rand.NewPCG(uint64(a), uint64(lim.Rate)))
				const remote = "203.0.113.5:1"
				var seen [2]int // allowed, denied
				for step := range steps {
					f.advance(time.Duration(rng.IntN(9000)) * time.Millisecond)
					cost := int64(1 + rng.IntN(3))
					if rng.IntN(25) == 0 {
						cost = capacity + 1 + int64(rng.IntN(3)) // can never pass
					}
					w := get(h, "/?cost="+strconv.FormatInt(cost, 10), remote)
					hdr := w.Result().Header
					pol := sftest.List(t, hdr.Get("RateLimit-Policy"))
					require.Len(t, pol, 1)
					window := pol[0].Params["w"]
					rl := sftest.List(t, hdr.Get("RateLimit"))
					require.Len(t, rl, 1)
					r := rl[0].Params["r"]
					tv, hasT := rl[0].Params["t"]
					reset, err := strconv.ParseInt(hdr.Get("X-RateLimit-Reset"), 10, 64)
					require.NoError(t, err)
					msg := fmt.Sprintf("step %d cost %d: %q %q reset %d", step, cost, hdr.Get("RateLimit"), hdr.Get("Retry-After"), reset)
					span := 3 * time.Duration(window) * time.Second

					if hasT && a != core.SlidingWindowCounter {
						require.LessOrEqual(t, tv, window, "t never exceeds w: %s", msg)
					}
					// X-RateLimit-Reset: until the quota is whole again.
					if reset > 0 {
						require.Equal(t, capacity, f.peekAt(t, l, remote, time.Duration(reset)*time.Second), msg)
						require.Less(t, f.peekAt(t, l, remote, time.Duration(reset-1)*time.Second), capacity, msg)
					}
					switch {
					case cost > capacity:
						require.Equal(t, http.StatusTooManyRequests, w.Code, msg)
						require.False(t, hasT, "no t when no wait helps: %s", msg)
						require.Empty(t, hdr.Get("Retry-After"), msg)
						require.Contains(t, w.Body.String(), "can never succeed")
					case w.Code == http.StatusTooManyRequests:
						seen[1]++
						wait := firstInstant(span, func(d time.Duration) bool { return f.peekAt(t, l, remote, d) >= cost })
						require.Positive(t, wait, msg)
						require.Equal(t, strconv.FormatInt(ceilSec(wait), 10), hdr.Get("Retry-After"), "Retry-After is the wait: %s", msg)
						require.True(t, hasT, msg)
						require.Equal(t, ceilSec(wait), tv, "t of a denial: the wait, as Retry-After: %s", msg)
						require.GreaterOrEqual(t, f.peekAt(t, l, remote, time.Duration(tv)*time.Second), cost, "the request passes after t: %s", msg)
					default:
						seen[0]++
						require.Equal(t, http.StatusOK, w.Code, msg)
						require.Empty(t, hdr.Get("Retry-After"), msg)
						if r >= capacity {
							break
						}
						more := firstInstant(span, func(d time.Duration) bool { return f.peekAt(t, l, remote, d) > r })
						require.Positive(t, more, msg)
						require.True(t, hasT, msg)
						switch a {
						case core.TokenBucket, core.LeakyBucket, core.GCRA, core.FixedWindow:
							require.Equal(t, ceilSec(more), tv, "t is until more quota, exactly: %s", msg)
						case core.SlidingWindowLog:
							// An upper bound: the newest entry's departure.
							require.GreaterOrEqual(t, tv, ceilSec(more), msg)
						case core.SlidingWindowCounter:
							// An upper bound: the key's fresh instant.
							require.GreaterOrEqual(t, tv, ceilSec(more), msg)
						}
						require.Greater(t, f.peekAt(t, l, remote, time.Duration(tv)*time.Second), r, "more quota after t: %s", msg)
					}
				}
				require.Positive(t, seen[0])
				require.Positive(t, seen[1], "the trace reached denials")
			})
		}
	}
}

// The 10th of 10/min gets t=6 (the next token), not t=60 (the window).
func TestTenthOfTenPerMinute(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, nil, ipPolicy(t, "p", core.PerMinute(10)))
	h := httplimit.New(l)(ok)
	var w *httptest.ResponseRecorder
	for range 10 {
		w = get(h, "/", "192.0.2.1:1")
	}
	require.Equal(t, `"p";r=0;t=6`, w.Result().Header.Get("RateLimit"))
}

// TestOverrideAdvertisesTheAppliedLimit: an override
// of 1000/hour on a 10/min policy is advertised as q=1000;w=3600, and the
// formatter's cache, keyed by the limit applied, keeps each identity's own
// values when overridden and plain requests alternate.
func TestOverrideAdvertisesTheAppliedLimit(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, nil, ipPolicy(t, "p", core.PerMinute(10)))
	require.NoError(t, l.SetOverride(t.Context(), "p", "192.0.2.7", core.PerHour(1000), f.now.Add(time.Hour)))
	h := httplimit.New(l)(ok)
	for range 20 {
		w := get(h, "/", "192.0.2.7:1")
		require.Equal(t, `"p";q=1000;w=3600`, w.Result().Header.Get("RateLimit-Policy"))
		require.Equal(t, "1000", w.Result().Header.Get("X-RateLimit-Limit"))
		w = get(h, "/", "192.0.2.8:1")
		if w.Code == http.StatusOK {
			require.Equal(t, `"p";q=10;w=60`, w.Result().Header.Get("RateLimit-Policy"))
			require.Equal(t, "10", w.Result().Header.Get("X-RateLimit-Limit"))
		}
	}
}

// TestBlockedIdentityT: a blocked identity's t is the time until the block
// ends, equal to Retry-After, not the window.
func TestBlockedIdentityT(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, nil, ipPolicy(t, "p", core.PerMinute(10)))
	require.NoError(t, l.Block(t.Context(), "p", "192.0.2.3", f.now.Add(2*time.Hour)))
	w := get(httplimit.New(l)(ok), "/", "192.0.2.3:1")
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	require.Equal(t, "7200", w.Result().Header.Get("Retry-After"))
	rl := sftest.List(t, w.Result().Header.Get("RateLimit"))
	require.Equal(t, int64(7200), rl[0].Params["t"])
}

// TestMissingIdentityDenied: a policy whose
// MissingKey is DenyRequest refuses a request without its identity, and
// says that no wait helps: no Retry-After, no t, a detail naming the policy.
func TestMissingIdentityDenied(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, nil,
		ipPolicy(t, "per-ip", core.PerMinute(100)),
		core.Policy{Name: "per-key", Key: keyfunc.Header("X-API-Key"), Limit: core.PerMinute(10), MissingKey: core.DenyRequest})
	h := httplimit.New(l)(ok)
	w := get(h, "/", "192.0.2.1:1")
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	require.Empty(t, w.Result().Header.Get("Retry-After"))
	require.NotContains(t, w.Result().Header.Get("RateLimit"), ";t=")
	require.Contains(t, w.Body.String(), `no identity for policy \"per-key\"`)
	require.Contains(t, w.Body.String(), `"retry":false`)
	require.Equal(t, http.StatusOK, get(h, "/", "192.0.2.1:1", "X-API-Key", "k").Code)
}
