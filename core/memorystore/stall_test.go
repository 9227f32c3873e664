package memorystore

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
)

// No single hold of a shard lock may do work proportional to the table.
// One shard grows to 300k keys, then every key expires and the sweeper
// empties and shrinks the table chunk by chunk. Every insert and every
// sweeper chunk moves a bounded number of slots. The size proves it: a
// whole-table rehash moves at least the table's slots (hundreds from the
// first growths on), and from 4096 slots up every growth is by half, so the
// bound is the same at every size past that; 300k keys take the table
// through ten such growths and the sweeper through as many shrinks.
// (Wall-clock bounds are only logged: on a shared 2-core machine the
// scheduler alone stalls a thread for hundreds of ms;
// BenchmarkChurnHotKeyLatency measures decision latency.)
func TestLockHoldsAreBounded(t *testing.T) {
	const keys = 300_000
	now := int64(1_700_000_000_000_000)
	s := newTestStore(t, &now, WithShards(1), WithMaxKeys(keys))
	ctx := context.Background()
	l := core.Per(1, time.Second)
	sh := &s.shards[0]
	buf := make([]byte, 0, 16)
	worst, maxMoved := time.Duration(0), 0
	hold := func(t0 time.Time, rehashed int) {
		worst = max(worst, time.Since(t0))
		maxMoved = max(maxMoved, sh.t.rehashed-rehashed)
	}
	for i := range keys {
		buf = strconv.AppendInt(append(buf[:0], 'k'), int64(i), 10)
		r, t0 := sh.t.rehashed, time.Now()
		// The store keeps nothing of the key: no garbage, no GC assist.
		_, err := takeID(ctx, s, unsafe.String(&buf[0], len(buf)), l, 1)
		hold(t0, r)
		if err != nil {
			t.Fatal(err)
		}
	}
	require.Equal(t, keys, s.Len())
	require.Greater(t, sh.t.rehashed, keys, "the table grew by migrations")
	require.LessOrEqual(t, maxMoved, 76, "slots moved by one insert")
	insertWorst := worst
	now += 2_000_000
	chunks, maxMoved := 0, 0
	for pass := 0; sh.t.n > 0 || len(sh.t.slots) > 256 || sh.t.migrating(); {
		r, t0 := sh.t.rehashed, time.Now()
		_, done := sh.sweepChunk(now, s.sweepChunk)
		hold(t0, r)
		chunks++
		if done {
			pass++
			require.Less(t, pass, 20, "the sweeper never emptied and shrank the table")
		}
	}
	require.LessOrEqual(t, maxMoved, s.sweepChunk, "slots moved by one sweeper chunk")
	t.Logf("worst insert %s, worst hold %s over %d sweeper chunks", insertWorst, worst, chunks)
}

// pass runs one whole sweeper pass over sh.
func pass(sh *shard, now int64) {
	for {
		if _, done := sh.sweepChunk(now, sweepChunk); done {
			return
		}
	}
}

// A table that churn refills between sweeper passes keeps its size: the
// sweeper empties it every pass, but shrinking it would only make the
// next inserts grow it again. One left alone shrinks.
func TestChurnedTableIsNotShrunk(t *testing.T) {
	now := int64(1_700_000_000_000_000)
	s := newTestStore(t, &now, WithShards(1))
	ctx := context.Background()
	sh := &s.shards[0]
	l := core.Per(1, time.Millisecond)
	key := 0
	size := 0
	for cycle := range 6 {
		for range 20_000 {
			key++
			_, err := takeID(ctx, s, "k"+strconv.Itoa(key), l, 1)
			require.NoError(t, err)
		}
		now += 1_000_000
		pass(sh, now)
		require.Zero(t, sh.t.n, "cycle %d: the pass deleted every expired key", cycle)
		if cycle == 0 {
			size = len(sh.t.slots)
		}
		require.Equal(t, size, len(sh.t.slots), "cycle %d: the table kept its size", cycle)
		require.False(t, sh.t.migrating())
	}
	for range 20 {
		pass(sh, now)
	}
	require.LessOrEqual(t, len(sh.t.slots), 256, "left alone, the table shrank")
}

// One sweeper pass, in chunks of any size, deletes exactly the expired keys
// whatever their mix with live ones in the probe clusters (deletions shift
// later keys back, across the end of the table too), and keeps every live
// key's state.
func TestSweepPassDeletesExactlyTheExpired(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 3))
		now := int64(1_700_000_000_000_000)
		s := newTestStore(t, &now, WithShards(1))
		ctx := context.Background()
		short, long := core.Per(1, time.Second), core.PerHour(10)
		live := map[string]bool{}
		n := 500 + rng.IntN(5000)
		for i := range n {
			key := "k" + strconv.Itoa(i)
			l := short
			if rng.IntN(3) == 0 {
				l, live[key] = long, true
			}
			_, err := takeID(ctx, s, key, l, 1)
			require.NoError(t, err)
		}
		now += 2_000_000 // the short keys have expired
		sh := &s.shards[0]
		sh.sweep = rng.IntN(len(sh.t.slots)) // start anywhere
		chunk := 1 + rng.IntN(300)
		for {
			if _, done := sh.sweepChunk(now, chunk); done {
				break
			}
		}
		require.Equal(t, len(live), s.Len(), "seed %d", seed)
		for key := range live {
			r, err := takeID(ctx, s, key, long, 0)
			require.NoError(t, err)
			require.Equal(t, int64(9), r.Remaining, "seed %d: %s kept its state", seed, key)
		}
	}
}

// A table shrunk by the sweeper moves its keys at most 25 slots per
// insert, whatever its size and its keys' count.
func TestShrinkMovesAFewSlotsPerInsert(t *testing.T) {
	for _, keep := range []int{1, 100, 3000, 9000} {
		now := int64(1_700_000_000_000_000)
		s := newTestStore(t, &now, WithShards(1))
		ctx := context.Background()
		sh := &s.shards[0]
		for i := range 100_000 {
			l := core.Per(1, time.Millisecond)
			if i < keep {
				l = core.PerHour(1)
			}
			_, err := takeID(ctx, s, "k"+strconv.Itoa(i), l, 1)
			require.NoError(t, err)
		}
		now += 1_000_000
		for n := 0; !sh.t.migrating(); n++ {
			require.Less(t, n, 10, "keep %d: the sparse table never shrank", keep)
			pass(sh, now)
		}
		require.LessOrEqual(t, sh.t.step, 25, "keep %d: %d of %d slots", keep, sh.t.n, len(sh.t.slots))
		maxMoved := 0
		for i := 0; sh.t.migrating(); i++ {
			r := sh.t.rehashed
			_, err := takeID(ctx, s, "new"+strconv.Itoa(i), core.PerHour(1), 1)
			require.NoError(t, err)
			maxMoved = max(maxMoved, sh.t.rehashed-r)
		}
		require.LessOrEqual(t, maxMoved, 25, "keep %d", keep)
	}
}
