package memorystore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// fixedClock is a clock the test moves by hand.
type fixedClock struct{ now time.Time }

func (c *fixedClock) Now() time.Time { return c.now }

func newBoundedStore(t *testing.T, c *fixedClock, maxKeys int) *memorystore.Store {
	t.Helper()
	s, err := memorystore.New(memorystore.WithClock(c.Now), memorystore.WithMaxKeys(maxKeys),
		memorystore.WithShards(4), memorystore.WithSweepInterval(0))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// throttle uses key up under l and checks that it is denied.
func throttle(t *testing.T, s *memorystore.Store, key string, l core.Limit) {
	t.Helper()
	ctx := context.Background()
	for i := int64(0); ; i++ {
		r, err := takeID(ctx, s, key, l, 1)
		require.NoError(t, err)
		if !r.Allowed {
			require.Equal(t, l.Capacity(), i, "%s admitted its capacity", key)
			return
		}
		require.Less(t, i, l.Capacity())
	}
}

// A flood of new keys (twice the bound) must not make a
// throttled key start fresh, whatever its algorithm and whatever limit the
// flooding keys have (policies share the store).
func TestFloodDoesNotForgetAThrottledKey(t *testing.T) {
	const maxKeys = 1024
	floods := []struct {
		name string
		l    core.Limit
	}{
		{"same limit", core.Limit{}}, // filled in per algorithm
		{"longer period", core.Per(1000, 24*time.Hour)},
		{"longer period fixed window", core.Per(1000, 24*time.Hour).WithAlgorithm(core.FixedWindow)},
		{"longer period log", core.Per(1000, 24*time.Hour).WithAlgorithm(core.SlidingWindowLog)},
		{"longer period counter", core.Per(1000, 24*time.Hour).WithAlgorithm(core.SlidingWindowCounter)},
		{"shorter period", core.Per(5, time.Second)},
	}
	for _, a := range limitertest.Algorithms {
		for _, f := range floods {
			t.Run(a.String()+"/"+f.name, func(t *testing.T) {
				c := &fixedClock{now: time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC)}
				s := newBoundedStore(t, c, maxKeys)
				ctx := context.Background()
				l := core.PerMinute(10).WithAlgorithm(a)
				fl := f.l
				if fl == (core.Limit{}) {
					fl = l
				}
				throttle(t, s, "victim", l)
				for i := range 2 * maxKeys {
					_, err := takeID(ctx, s, "flood:"+strconv.Itoa(i), fl, 1)
					require.NoError(t, err)
					c.now = c.now.Add(time.Microsecond)
				}
				require.Positive(t, s.Evictions())
				r, err := takeID(ctx, s, "victim", l, 1)
				require.NoError(t, err)
				require.False(t, r.Allowed, "the throttled key was forgotten after %d evictions", s.Evictions())
				require.Equal(t, int64(0), r.Remaining)
			})
		}
	}
}

// A property over random mixes: keys of every algorithm and of several
// limits share a small store, used lightly or heavily while the clock moves;
// a few of them are throttled at any time. Whatever is evicted, a key that a
// peek found throttled stays throttled until its RetryAfter has passed, and
// the bound holds. 20 000 steps a seed evict 38 times the bound while some
// 50 keys are throttled and watched (up to 24 at once).
func TestEvictionNeverForgetsAThrottledKey(t *testing.T) {
	const maxKeys = 512
	limits := []core.Limit{}
	for _, a := range limitertest.Algorithms {
		limits = append(limits,
			core.PerMinute(10).WithAlgorithm(a),
			core.Per(3, time.Second).WithAlgorithm(a),
			core.PerHour(100).WithAlgorithm(a),
		)
	}
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 12))
			c := &fixedClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			s := newBoundedStore(t, c, maxKeys)
			ctx := context.Background()
			type victim struct {
				l     core.Limit
				until time.Time
			}
			victims := map[string]victim{}
			next := 0
			for step := range 20_000 {
				c.now = c.now.Add(time.Duration(rng.IntN(2000)) * time.Microsecond)
				l := limits[rng.IntN(len(limits))]
				switch {
				case len(victims) < 24 && rng.IntN(200) == 0:
					key := "victim:" + strconv.Itoa(step)
					throttle(t, s, key, l)
					r, err := takeID(ctx, s, key, l, 0)
					require.NoError(t, err)
					require.False(t, r.Allowed)
					victims[key] = victim{l: l, until: c.now.Add(r.RetryAfter)}
				case rng.IntN(4) == 0: // a key used heavily, not to its limit
					key := "heavy:" + strconv.Itoa(next)
					next++
					_, err := takeID(ctx, s, key, l, l.Capacity()-1)
					require.NoError(t, err)
				default: // a new key, used once
					key := "light:" + strconv.Itoa(next)
					next++
					_, err := takeID(ctx, s, key, l, 1)
					require.NoError(t, err)
				}
				if step%97 != 0 {
					continue
				}
				require.LessOrEqual(t, s.Len(), maxKeys)
				for key, v := range victims {
					if !c.now.Before(v.until) {
						delete(victims, key)
						continue
					}
					r, err := takeID(ctx, s, key, v.l, 0)
					require.NoError(t, err)
					require.False(t, r.Allowed, "step %d: throttled %s key %s forgotten (%d evictions)", step, v.l.Algorithm, key, s.Evictions())
				}
			}
			require.Greater(t, s.Evictions(), int64(10*maxKeys))
		})
	}
}

// The same through a Limiter whose policies share the store: a user
// throttled by a fixed window stays throttled while a flood of new clients
// (new addresses and users, twice the bound) fills the store with keys of
// both policies.
func TestLimiterFloodKeepsAThrottledUser(t *testing.T) {
	const maxKeys = 512
	c := &fixedClock{now: time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC)}
	s := newBoundedStore(t, c, maxKeys)
	ip := keyfunc.IP()
	l, err := core.NewLimiter(s, []core.Policy{
		{Name: "per-ip", Key: ip, Limit: core.Per(1000, 24*time.Hour)},
		{Name: "per-user", Key: keyfunc.Header("X-User"), Limit: core.PerMinute(5).WithAlgorithm(core.FixedWindow)},
	})
	require.NoError(t, err)
	ctx := context.Background()
	alice := &keyfunc.Static{Remote: "192.0.2.1:1", Headers: map[string][]string{"X-User": {"alice"}}}
	for i := range 6 {
		d, err := l.Check(ctx, alice)
		require.NoError(t, err)
		require.Equal(t, i < 5, d.Allowed, "request %d", i)
	}
	for i := range 2 * maxKeys {
		r := &keyfunc.Static{Remote: fmt.Sprintf("10.%d.%d.%d:1", i>>16&255, i>>8&255, i&255),
			Headers: map[string][]string{"X-User": {"u" + strconv.Itoa(i)}}}
		d, err := l.Check(ctx, r)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		c.now = c.now.Add(time.Microsecond)
	}
	require.Positive(t, s.Evictions())
	d, err := l.Check(ctx, alice)
	require.NoError(t, err)
	require.False(t, d.Allowed, "alice was forgotten after %d evictions", s.Evictions())
	require.Equal(t, "per-user", d.Bound().Policy)
}
