package memorystore

import (
	"context"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
)

// Issue 12 item 21: no single hold of a shard lock may do work proportional
// to the table. One shard grows to 2M keys (each growth used to rehash the
// whole table under the lock: 60 ms and more), then every key expires and
// the sweeper empties and shrinks the table chunk by chunk. Every insert
// and every sweeper chunk moves a bounded number of slots. (Wall-clock
// bounds are only logged: on a shared 2-core machine the scheduler alone
// stalls a thread for hundreds of ms; BenchmarkChurnHotKeyLatency measures
// decision latency.)
func TestLockHoldsAreBounded(t *testing.T) {
	const keys = 2_000_000
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
		_, err := s.Take(ctx, unsafe.String(&buf[0], len(buf)), l, 1)
		hold(t0, r)
		if err != nil {
			t.Fatal(err)
		}
	}
	require.Equal(t, keys, s.Len())
	require.Greater(t, sh.t.rehashed, keys, "the table grew by migrations")
	require.LessOrEqual(t, maxMoved, 32, "slots moved by one insert")
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
