package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

func newStore(t *testing.T, client redis.UniversalClient, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(client, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformanceSingleNode(t *testing.T) {
	client := redistest.StartServer(t).Client(t)
	limitertest.Run(t, func(t *testing.T, clock func() time.Time) core.Store {
		return newStore(t, client, redisstore.WithClock(clock), redisstore.WithTimeout(10*time.Second))
	})
}

func TestConformanceUnpipelined(t *testing.T) {
	client := redistest.StartServer(t).Client(t)
	limitertest.Run(t, func(t *testing.T, clock func() time.Time) core.Store {
		return newStore(t, client, redisstore.WithClock(clock), redisstore.WithTimeout(10*time.Second), redisstore.WithPipelining(0, 0))
	})
}

// On a 3-master Cluster (groups across identities: one script per identity
// and compensation) and behind Sentinel, the store passes the same suite.
func TestConformanceCluster(t *testing.T) {
	client := shared.Cluster(t).Client(t)
	limitertest.Run(t, func(t *testing.T, clock func() time.Time) core.Store {
		return newStore(t, client, redisstore.WithClock(clock), redisstore.WithTimeout(10*time.Second))
	})
}

func TestConformanceSentinel(t *testing.T) {
	client := redistest.StartSentinel(t).Client(t)
	limitertest.Run(t, func(t *testing.T, clock func() time.Time) core.Store {
		return newStore(t, client, redisstore.WithClock(clock), redisstore.WithTimeout(10*time.Second))
	})
}

// traceMemory is the memory store a differential trace compares a Redis
// store with, on clock: without a sweeper. Redis expires keys in real time,
// which the trace's clock runs one to two hours ahead of, so it keeps every
// key the trace writes; a sweeper deletes those expired on the trace's
// clock, and a later step back finds them fresh in memory only.
func traceMemory(clock *limitertest.Clock) (*memorystore.Store, error) {
	return memorystore.New(memorystore.WithClock(clock.Now), memorystore.WithSweepInterval(0))
}

// The same random traces through the memory store and the Redis store give
// identical Results at every step, for all six algorithms: takes of any
// cost, bookings (Op.MaxDelay; a window takes), refunds of earlier
// admissions (by their Result.At, in any order, some of expired or unknown
// instants; those made under an override by its name in each store),
// overrides of any algorithm and blocks of random lengths set and cleared
// at random points (their waits hand over to the key's own state at their
// end), and clock steps forwards and backwards, small and large, within and
// across windows. Each store names its overrides its own way:
// Result.Override is compared as set or not.
func TestSameAnswersAsMemory(t *testing.T) {
	client := redistest.StartServer(t).Client(t)
	var total struct{ compared, probed, overridden atomic.Int64 }
	// The algorithms at once (each on keys, clocks and a random source of
	// its own), so that one's round trips to Redis overlap another's work.
	t.Run("algorithms", func(t *testing.T) {
		for _, a := range limitertest.Algorithms {
			t.Run(a.String(), func(t *testing.T) {
				t.Parallel()
				compared, probed, overridden := sameAnswersAsMemory(t, client, a)
				total.compared.Add(int64(compared))
				total.probed.Add(int64(probed))
				total.overridden.Add(int64(overridden))
			})
		}
	})
	t.Logf("%d steps compared (%d retries at or 1µs before RetryAfter; %d under an override or a block)", total.compared.Load(), total.probed.Load(), total.overridden.Load())
	require.Positive(t, total.probed.Load())
	require.Positive(t, total.overridden.Load())
}

// sameAnswersAsMemory drives random traces of algorithm a through a memory
// store and a Redis store on client (see TestSameAnswersAsMemory), failing
// t at a mismatch; it returns the steps compared, the retries probed and
// the decisions made under an override or a block.
func sameAnswersAsMemory(t *testing.T, client redis.UniversalClient, a core.Algorithm) (compared, probed, overridden int) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(11, uint64(a)))
	mismatches := 0
	for iter := range 10 {
		clock := limitertest.NewClock()
		mem, err := traceMemory(clock)
		require.NoError(t, err)
		red := newStore(t, client, redisstore.WithClock(clock.Now), redisstore.WithTimeout(10*time.Second))
		l := core.Per(1+rng.Int64N(15), time.Duration(1+rng.Int64N(3_000_000))*time.Microsecond).WithAlgorithm(a)
		if a.Bucket() {
			l.Burst = rng.Int64N(20)
			if iter%3 == 2 { // a large rate: a TAT clamp within reach of a backward step
				l = core.Limit{Algorithm: a, Rate: 999_999_937, Period: 1000 * time.Second, Burst: 1 + rng.Int64N(9_000_000)}
			}
		}
		if l.Validate() != nil {
			continue
		}
		key := limitertest.Key(t)
		P := int64(l.Period / time.Microsecond)
		step := max(P/l.Rate*2, 2)
		var history []string
		var ats []int64
		var costs []int64
		var ovs [][2]uint64 // the override each store named of each admission
		var back time.Duration
		var until time.Time // of the override set last
		// same compares the Results of the two stores, and counts
		// those decided under an override or a block.
		same := func(want, got core.Result) bool {
			if clock.Now().Before(until) {
				overridden++
			}
			if (want.Override != 0) != (got.Override != 0) || (want.Applied == nil) != (got.Applied == nil) {
				return false
			}
			if want.Applied != nil && *want.Applied != *got.Applied {
				return false
			}
			want.Override, got.Override, want.Applied, got.Applied = 0, 0, nil, nil
			return want == got
		}
		for i := range 300 {
			var d time.Duration
			switch rng.IntN(14) {
			case 0:
				d = time.Duration(rng.Int64N(2*P)) * time.Microsecond
			case 1:
				d = -time.Duration(rng.Int64N(step)) * time.Microsecond // a small step back
			case 2:
				d = -time.Duration(rng.Int64N(3*P)) * time.Microsecond // back across windows
			case 3:
				d = -time.Duration(rng.Int64N(int64(20 * time.Minute))).Truncate(time.Microsecond) // far back
			case 4, 5:
			default:
				d = time.Duration(rng.Int64N(step)) * time.Microsecond
			}
			if back-d > 30*time.Minute { // Redis expires keys in real time: stay ahead of it (see limitertest.Clock)
				d = -d
			}
			back -= d
			clock.Advance(d)
			now := clock.Now().UnixMicro()
			if rng.IntN(12) == 0 { // an override, a block, or neither
				o := core.Override{Until: clock.Now().Add(time.Duration(1+rng.Int64N(3*P)) * time.Microsecond)}
				if rng.IntN(2) == 0 {
					o.Limit = limitertest.WaitLimit(rng, limitertest.Algorithms[rng.IntN(6)])
				}
				if rng.IntN(5) == 0 {
					require.NoError(t, mem.ClearOverride(ctx, key))
					require.NoError(t, red.ClearOverride(ctx, key))
					until = time.Time{}
					history = append(history, fmt.Sprintf("at %d override cleared", now))
					continue
				}
				require.NoError(t, mem.SetOverride(ctx, key, o))
				require.NoError(t, red.SetOverride(ctx, key, o))
				until = o.Until
				history = append(history, fmt.Sprintf("at %d override %+v", now, o))
				continue
			}
			if len(ats) > 0 && rng.IntN(6) == 0 {
				j := rng.IntN(len(ats))
				at, cost, ov := ats[j], costs[j], ovs[j]
				if rng.IntN(8) == 0 {
					at += rng.Int64N(3) - 1 // an instant no admission has
				}
				require.NoError(t, mem.Refund(ctx, core.Admission{Key: key, Limit: l, Cost: cost, At: at, Override: ov[0]}))
				require.NoError(t, red.Refund(ctx, core.Admission{Key: key, Limit: l, Cost: cost, At: at, Override: ov[1]}))
				want, err := limitertest.TakeOne(ctx, mem, key, l, 0)
				require.NoError(t, err)
				got, err := limitertest.TakeOne(ctx, red, key, l, 0)
				require.NoError(t, err)
				history = append(history, fmt.Sprintf("at %d refund %d of %d, then peek: %+v", now, cost, at, want))
				compared++
				if !same(want, got) {
					mismatches++
					t.Errorf("%s iter %d step %d: redis %+v\nhistory (memory):\n%s", l, iter, i, got, strings.Join(history[max(0, len(history)-8):], "\n"))
				}
				continue
			}
			cost := int64(1)
			switch rng.IntN(8) {
			case 0:
				cost = 0
			case 1:
				cost = rng.Int64N(min(l.Capacity(), 30) + 2)
			case 2:
				cost = l.Capacity()
			}
			var maxDelay time.Duration
			if rng.IntN(4) == 0 { // a booking (on a window: a take)
				maxDelay = time.Duration(rng.Int64N(3*P)) * time.Microsecond
			}
			var want, got [1]core.Result
			require.NoError(t, mem.Take(ctx, []core.Op{{Key: key, Limit: l, Cost: cost, MaxDelay: maxDelay}}, want[:]))
			require.NoError(t, red.Take(ctx, []core.Op{{Key: key, Limit: l, Cost: cost, MaxDelay: maxDelay}}, got[:]))
			history = append(history, fmt.Sprintf("at %d cost %d within %s: %+v", now, cost, maxDelay, want[0]))
			compared++
			if !same(want[0], got[0]) {
				mismatches++
				t.Errorf("%s iter %d step %d: redis %+v\nhistory (memory):\n%s", l, iter, i, got[0], strings.Join(history[max(0, len(history)-8):], "\n"))
			}
			if mismatches > 5 {
				t.FailNow()
			}
			if want[0].Allowed && cost > 0 {
				ats, costs, ovs = append(ats, want[0].At), append(costs, cost), append(ovs, [2]uint64{want[0].Override, got[0].Override})
			}
			if !want[0].Allowed && !want[0].Never() && cost > 0 && rng.IntN(2) == 0 {
				// the same cost, 1µs before RetryAfter and at it: denied, then admitted, on both
				for j, d := range []time.Duration{want[0].RetryAfter - time.Microsecond, time.Microsecond} {
					clock.Advance(d)
					back -= d
					require.NoError(t, mem.Take(ctx, []core.Op{{Key: key, Limit: l, Cost: cost}}, want[:]))
					require.NoError(t, red.Take(ctx, []core.Op{{Key: key, Limit: l, Cost: cost}}, got[:]))
					history = append(history, fmt.Sprintf("at %d cost %d (a retry): %+v", clock.Now().UnixMicro(), cost, want[0]))
					compared++
					if !same(want[0], got[0]) {
						mismatches++
						t.Errorf("%s iter %d step %d: redis %+v\nhistory (memory):\n%s", l, iter, i, got[0], strings.Join(history[max(0, len(history)-8):], "\n"))
					}
					require.Equal(t, j == 1, want[0].Allowed, "%s iter %d step %d: a retry %dµs before now+RetryAfter\n%s", l, iter, i, 1-j, strings.Join(history[max(0, len(history)-4):], "\n"))
					probed++
				}
				if want[0].Allowed {
					ats, costs, ovs = append(ats, want[0].At), append(costs, cost), append(ovs, [2]uint64{want[0].Override, got[0].Override})
				}
			}
		}
		mem.Close()
	}
	require.Zero(t, mismatches)
	return compared, probed, overridden
}

// Random groups of ops (one to four policies over up to four identities,
// hostile identities among them, shadow ops, overrides, refunds of
// admissions made under overrides or not, whose overrides may since have
// been replaced or have ended) through the memory store and the Redis
// store: identical Results at every step (each store names its overrides
// its own way: Result.Override is compared as set or not). The
// memory store decides a group all or nothing under its lock; a standalone
// Redis decides it in one script, cross-identity groups included.
func TestBatchSameAnswersAsMemory(t *testing.T) {
	client := redistest.StartServer(t).Client(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(21, 22))
	idents := []string{"", "-b", "-{c}", "-%d#"}
	overRefunds := 0
	for iter := range 60 {
		clock := limitertest.NewClock()
		mem, err := traceMemory(clock)
		require.NoError(t, err)
		red := newStore(t, client, redisstore.WithClock(clock.Now), redisstore.WithTimeout(10*time.Second))
		base := limitertest.Key(t).Identity
		type policy struct {
			key   core.Key
			limit core.Limit
		}
		var ps []policy
		for j := range 1 + rng.IntN(4) {
			a := limitertest.Algorithms[rng.IntN(6)]
			l := core.Per(1+rng.Int64N(8), time.Duration(100_000+rng.Int64N(2_000_000))*time.Microsecond).WithAlgorithm(a)
			ident := base + idents[rng.IntN(len(idents))]
			ps = append(ps, policy{core.Key{Identity: ident, Policy: fmt.Sprint("p", j)}, l})
		}
		var history []string
		type admission struct {
			at         int64
			memOv, red uint64 // the override each store named
		}
		admitted := map[core.Key][]admission{}
		for step := range 60 {
			clock.Advance(time.Duration(rng.Int64N(300_000)) * time.Microsecond)
			if rng.IntN(12) == 0 { // an override: a raise, or a block
				p := ps[rng.IntN(len(ps))]
				o := core.Override{Until: clock.Now().Add(time.Duration(1+rng.Int64N(800_000)) * time.Microsecond)}
				if rng.IntN(2) == 0 {
					o.Limit = core.Per(1+rng.Int64N(8), p.limit.Period).WithAlgorithm(p.limit.Algorithm)
				}
				require.NoError(t, mem.SetOverride(ctx, p.key, o))
				require.NoError(t, red.SetOverride(ctx, p.key, o))
				history = append(history, fmt.Sprintf("at %d override %q %+v", clock.Now().UnixMicro(), p.key, o))
				continue
			}
			if rng.IntN(6) == 0 {
				p := ps[rng.IntN(len(ps))]
				cost := 1 + rng.Int64N(3)
				var adm admission // an earlier decision's, or a stranger
				if as := admitted[p.key]; len(as) > 0 {
					adm = as[rng.IntN(len(as))]
				}
				if adm.memOv != 0 {
					overRefunds++
				}
				require.NoError(t, mem.Refund(ctx, core.Admission{Key: p.key, Limit: p.limit, Cost: cost, At: adm.at, Override: adm.memOv}))
				require.NoError(t, red.Refund(ctx, core.Admission{Key: p.key, Limit: p.limit, Cost: cost, At: adm.at, Override: adm.red}))
				history = append(history, fmt.Sprintf("at %d refund %q %d of %+v", clock.Now().UnixMicro(), p.key, cost, adm))
				continue
			}
			ops := make([]core.Op, len(ps))
			for i, p := range ps {
				ops[i] = core.Op{Key: p.key, Limit: p.limit, Cost: rng.Int64N(3), Shadow: rng.IntN(5) == 0}
			}
			want, got := make([]core.Result, len(ops)), make([]core.Result, len(ops))
			require.NoError(t, mem.Take(ctx, ops, want))
			require.NoError(t, red.Take(ctx, ops, got))
			history = append(history, fmt.Sprintf("at %d ops %+v\n    -> %+v", clock.Now().UnixMicro(), ops, want))
			for i, op := range ops {
				require.Equal(t, want[i].Override != 0, got[i].Override != 0, "iter %d step %d op %d: an override named", iter, step, i)
				require.Equal(t, want[i].Applied != nil, want[i].Override != 0, "an override applied, and named")
				if op.Cost > 0 && want[i].Allowed {
					admitted[op.Key] = append(admitted[op.Key], admission{want[i].At, want[i].Override, got[i].Override})
				}
				want[i].Override, got[i].Override = 0, 0
			}
			if !assert.Equal(t, want, got, "iter %d step %d", iter, step) {
				t.Fatalf("history:\n%s", strings.Join(history[max(0, len(history)-12):], "\n"))
			}
		}
		mem.Close()
	}
	t.Logf("%d refunds of admissions under overrides", overRefunds)
	require.Positive(t, overRefunds, "the traces refund admissions made under overrides")
}

// The Redis keys of a core.Key are byte for byte those of earlier versions,
// which took the key joined as "identity\x00policy" and split it at its last
// NUL (a rolling upgrade mixes versions on one Redis): the state, the
// override and the override's state of every kind of identity and policy,
// a NUL in either included, are where an older instance reads them.
func TestRedisKeysAreThoseOfEarlierVersions(t *testing.T) {
	client := redistest.StartServer(t).Client(t)
	s := newStore(t, client, redisstore.WithPrefix("rl"))
	ctx := context.Background()
	run := limitertest.Key(t).Identity
	cases := []struct {
		k    core.Key
		base string // the keys' common part; the state adds "tb", the override "ovr"
	}{
		{core.Key{Identity: "ip:1.2.3.4" + run, Policy: "per-second"}, "rl:{ip:1.2.3.4" + run + "}:per-second:"},
		{core.Key{Identity: "u{%}" + run, Policy: "per-ip"}, "rl:{u%7B%25%7D" + run + "}:per-ip:"},
		{core.Key{Identity: "u" + run}, "rl:{u" + run + "}:"},
		{core.Key{Identity: "u" + run, Policy: "{x}"}, "rl:{u" + run + "}:%7Bx%7D:"},
		{core.Key{Identity: "a\x00b" + run, Policy: "p"}, "rl:{a\x00b" + run + "}:p:"},
		// A policy holding a NUL is cut at its last one, as the joined key was.
		{core.Key{Identity: "u" + run, Policy: "a\x00b"}, "rl:{u" + run + "\x00a}:b:"},
	}
	l := core.PerMinute(4)
	for _, c := range cases {
		require.Equal(t, c.base+"tb", s.Key(c.k, core.TokenBucket))
		r, err := limitertest.TakeOne(ctx, s, c.k, l, 1)
		require.NoError(t, err)
		require.True(t, r.Allowed)
		require.Equal(t, int64(1), client.Exists(ctx, c.base+"tb").Val(), "%q: the state is at %q", c.k, c.base+"tb")
		require.NoError(t, s.SetOverride(ctx, c.k, core.Override{Limit: core.PerMinute(9), Until: time.Now().Add(time.Minute)}))
		require.Equal(t, int64(1), client.Exists(ctx, c.base+"ovr").Val(), "%q: the override is at %q", c.k, c.base+"ovr")
		r, err = limitertest.TakeOne(ctx, s, c.k, l, 1)
		require.NoError(t, err)
		require.Equal(t, int64(9), r.Capacity)
		require.Equal(t, int64(1), client.Exists(ctx, c.base+"ovr:s").Val(), "%q: the override's state is at %q", c.k, c.base+"ovr:s")
		require.NoError(t, s.ClearOverride(ctx, c.k))
		require.Zero(t, client.Exists(ctx, c.base+"ovr").Val())
		require.NoError(t, s.Reset(ctx, c.k, l))
		require.Zero(t, client.Exists(ctx, c.base+"tb").Val())
	}
	s.Close()
	_, err := limitertest.TakeOne(ctx, s, cases[0].k, l, 1)
	require.ErrorIs(t, err, core.ErrClosed)
}

// takeID is a one-op Take of the identity id under the policy "p".
func takeID(ctx context.Context, s core.Store, id string, l core.Limit, cost int64) (core.Result, error) {
	return limitertest.TakeOne(ctx, s, keyOf(id), l, cost)
}

// keyOf is the Key takeID takes.
func keyOf(id string) core.Key { return core.Key{Identity: id, Policy: "p"} }
