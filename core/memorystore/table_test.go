package memorystore

import (
	"context"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
)

// The table against a map, through inserts, deletes and resizes (spread
// over the following inserts), with hashes drawn from a small range so that
// probe chains collide and wrap around. Every hash below 2^56 has its home
// in slot 0, so the keys form one cluster and each find walks it: 50 000
// ops over 1550 hashes take the table through 10 migrations (growths and a
// shrink) with 20-odd full checks midway through one; more ops or hashes
// only repeat these, at a cost that grows with the cluster's length.
func TestTableMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	var tab table
	ref := map[uint64]int64{}
	migrations := 0
	midway := 0 // full checks made while a migration was under way
	for i := range 50_000 {
		h := 1 + rng.Uint64N(1500)
		if rng.IntN(5) == 0 {
			h = 1<<56 - 1 - rng.Uint64N(50) // near the end of the table: wrap-around
		}
		h <<= 8
		id := uint64(rng.IntN(256)) // the id byte is not part of the key
		idx, found := tab.find(h | id)
		_, inRef := ref[h]
		require.Equal(t, inRef, found, "op %d hash %d", i, h)
		switch {
		case found && rng.IntN(2) == 0:
			require.Equal(t, ref[h], tab.slots[idx].v)
			require.Equal(t, uint8(h>>8), tab.slots[idx].id(), "the id stays with its key")
			tab.del(idx)
			delete(ref, h)
		case !found:
			if tab.full() {
				tab.grow()
				migrations++
			}
			tab.migrate(tab.step)
			idx, _ = tab.find(h)
			tab.slots[idx] = slot{h: h | uint64(uint8(h>>8)), v: int64(i)}
			tab.n++
			ref[h] = int64(i)
		}
		if i%10_000 == 0 && tab.n*4 < len(tab.slots) {
			tab.resize(max(8, tab.n*2))
			migrations++
		}
		// Every key is checked every 1000 ops, and every 4 while old slots
		// remain to be moved: a key lost by a migration is lost midway.
		if i%1000 == 0 || tab.migrating() && i%4 == 0 {
			if tab.migrating() {
				midway++
			}
			for h, v := range ref { // every key is in the new or the old slots
				idx, found := tab.find(h)
				if !found || tab.slots[idx].v != v { // plain: run ~20M times
					t.Fatalf("op %d hash %d: found %v, want value %d", i, h, found, v)
				}
			}
		}
	}
	require.Greater(t, migrations, 5)
	require.Greater(t, midway, 5)
	require.Equal(t, len(ref), tab.n)
	for h, v := range ref {
		idx, found := tab.find(h)
		require.True(t, found)
		require.Equal(t, v, tab.slots[idx].v)
	}
}

func newTestStore(t *testing.T, now *int64, opts ...Option) *Store {
	t.Helper()
	opts = append([]Option{WithClock(func() time.Time { return time.UnixMicro(*now) }), WithSweepInterval(0)}, opts...)
	s, err := New(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func TestEvictionKeepsTheMostUsefulKeys(t *testing.T) {
	now := int64(1_700_000_000_000_000)
	s := newTestStore(t, &now, WithMaxKeys(1000), WithShards(4))
	ctx := context.Background()
	l := core.PerHour(10)
	// 100 keys used up (an hour of debt), then many keys used lightly.
	for i := range 100 {
		r, err := takeID(ctx, s, "heavy"+string(rune('A'+i%26))+string(rune('a'+i/26)), l, 10)
		require.NoError(t, err)
		require.True(t, r.Allowed)
	}
	for i := range 5000 {
		_, err := takeID(ctx, s, "light"+itoa(i), l, 1)
		require.NoError(t, err)
	}
	require.LessOrEqual(t, s.Len(), 1000)
	require.Equal(t, int64(100+5000-s.Len()), s.Evictions())
	kept := 0
	for i := range 100 {
		r, err := takeID(ctx, s, "heavy"+string(rune('A'+i%26))+string(rune('a'+i/26)), l, 0)
		require.NoError(t, err)
		if !r.Allowed {
			kept++
		}
	}
	// Sampled eviction prefers the keys nearest to fresh: nearly every
	// heavy key is still remembered.
	require.GreaterOrEqual(t, kept, 95, "heavy keys remembered")
}

func itoa(i int) string {
	b := []byte{}
	for {
		b = append([]byte{byte('0' + i%10)}, b...)
		if i /= 10; i == 0 {
			return string(b)
		}
	}
}

func TestSweepDeletesExpiredKeys(t *testing.T) {
	now := int64(1_700_000_000_000_000)
	s := newTestStore(t, &now)
	ctx := context.Background()
	for i := range 20_000 {
		_, err := takeID(ctx, s, "k"+itoa(i), core.PerSecond(10).WithAlgorithm(core.Algorithm(i%6+1)), 1)
		require.NoError(t, err)
	}
	require.Equal(t, 20_000, s.Len())
	now += 3_000_000 // every key is fresh again
	deleted := 0
	for i := range s.shards {
		sh := &s.shards[i]
		for n := 0; sh.t.n > 0; n++ { // small chunks: incremental
			require.Less(t, n, 100, "shard %d never emptied", i)
			d, _ := sh.sweepChunk(now, 64)
			deleted += d
		}
		// Passes that find the table sparse shrink it, by at most 8× at a
		// time, moving its keys in chunks.
		for n := 0; len(sh.t.slots) > 256 || sh.t.migrating(); n++ {
			require.Less(t, n, 1000, "shard %d never shrank", i)
			sh.sweepChunk(now, 64)
		}
	}
	require.Equal(t, 20_000, deleted)
	require.Equal(t, 0, s.Len())
	for i := range s.shards {
		require.LessOrEqual(t, len(s.shards[i].t.slots), 256, "sparse tables shrink to the floor")
		for _, lg := range s.shards[i].logs {
			require.Nil(t, lg, "logs released")
		}
	}
}

func TestSweeperGoroutineStopsOnClose(t *testing.T) {
	before := runtime.NumGoroutine()
	s, err := New(WithSweepInterval(time.Millisecond))
	require.NoError(t, err)
	_, err = takeID(context.Background(), s, "k", core.Per(1, time.Millisecond), 1)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return s.Len() == 0 }, 2*time.Second, time.Millisecond, "the sweeper deletes the expired key")
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	// +1: Eventually runs the condition on a goroutine of its own.
	require.Eventually(t, func() bool { return runtime.NumGoroutine() <= before+1 }, time.Second, time.Millisecond, "the sweeper goroutine is gone")
	_, err = takeID(context.Background(), s, "k", core.PerSecond(1), 1)
	require.ErrorIs(t, err, core.ErrClosed)
}

func TestNoAllocationForExistingKeys(t *testing.T) {
	now := int64(1_700_000_000_000_000)
	s := newTestStore(t, &now)
	ctx := context.Background()
	for _, a := range []core.Algorithm{core.TokenBucket, core.FixedWindow, core.SlidingWindowCounter, core.GCRA, core.LeakyBucket} {
		l := core.PerSecond(1_000_000).WithAlgorithm(a)
		ops := [1]core.Op{{Key: core.Key{Identity: "hot", Policy: "p"}, Limit: l, Cost: 1}}
		var out [1]core.Result
		require.NoError(t, s.Take(ctx, ops[:], out[:]))
		allocs := testing.AllocsPerRun(1000, func() {
			now++
			if err := s.Take(ctx, ops[:], out[:]); err != nil {
				t.Fatal(err)
			}
		})
		require.Zero(t, allocs, a.String())
	}
}

func TestWarningStateLivesWithTheKey(t *testing.T) {
	now := int64(1_700_000_000_000_000)
	s := newTestStore(t, &now)
	ctx := context.Background()
	l := core.PerMinute(10)
	var states []core.State
	for range 11 {
		r, err := takeID(ctx, s, "k", l, 1)
		require.NoError(t, err)
		states = append(states, r.State)
	}
	N, W, T := core.Normal, core.Warning, core.Throttled
	require.Equal(t, []core.State{N, N, N, N, N, N, N, N, W, W, T}, states)
	now += 6_000_000 // one token back: 90% used, still Warning from Throttled
	r, _ := takeID(ctx, s, "k", l, 1)
	require.Equal(t, W, r.State)
	now += 30_000_000 // 5 back, one taken: 60% is below 70%
	r, _ = takeID(ctx, s, "k", l, 1)
	require.Equal(t, N, r.State)
	// Thresholds are options.
	s2 := newTestStore(t, &now, WithThresholds(core.Thresholds{Warn: 0.5, Clear: 0.2}))
	for i := range 6 {
		r, _ = takeID(ctx, s2, "k", l, 1)
		require.Equal(t, i >= 5, r.State == W, "request %d", i)
	}
	_, err := New(WithThresholds(core.Thresholds{Warn: 0.5, Clear: 0.9}))
	require.ErrorIs(t, err, core.ErrInvalidLimit)
}

func TestSpecCacheServesEveryLimit(t *testing.T) {
	now := int64(1_700_000_000_000_000)
	s := newTestStore(t, &now)
	ctx := context.Background()
	// More distinct limits than cache slots, interleaved: each key keeps
	// its own limit.
	for round := range 3 {
		for i := range 40 {
			l := core.PerMinute(int64(i + 1))
			r, err := takeID(ctx, s, "k"+itoa(i), l, 1)
			require.NoError(t, err)
			require.Equal(t, int64(i+1), r.Capacity)
			require.Equal(t, max(int64(i-round), 0), r.Remaining, "limit %d round %d", i+1, round)
			if i < round {
				require.False(t, r.Allowed)
			}
		}
	}
}
