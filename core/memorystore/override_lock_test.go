package memorystore

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
)

// A Take of one op under an override reads the override's state and the
// key's own state (for the waits of the key as a whole) in one hold of both
// shards' locks, so nothing that changes the own state (a refund of an
// admission made before the override, a Reset) lands between the two
// reads. The test holds the own state's shard: the Take must wait for it
// holding the override's shard (which comes first in the locking order),
// its override's state untouched, and decide once it gets both.
func TestOverrideTakeHoldsBothStates(t *testing.T) {
	now := int64(1_700_000_000_000_000)
	s := newTestStore(t, &now)
	ctx := context.Background()
	own := core.PerHour(2)
	raise := core.Limit{Algorithm: core.TokenBucket, Rate: 1, Period: 20 * time.Second}
	until := time.UnixMicro(now).Add(10 * time.Second)

	// A key whose override's state is in a shard before its own state's.
	var k core.Key
	var ownSh, ovSh *shard
	var ovH uint64
	for i := 0; ovSh == nil; i++ {
		k = core.Key{Identity: fmt.Sprintf("user-%d", i), Policy: "p"}
		for range 2 { // drain the own state
			_, err := takeKey(ctx, s, k, own, 1)
			require.NoError(t, err)
		}
		require.NoError(t, s.SetOverride(ctx, k, core.Override{Limit: raise, Until: until}))
		s.ovMu.RLock()
		gen := s.overrides[k].gen
		s.ovMu.RUnlock()
		h := s.overrideHash(&k, raise.Algorithm, gen)
		a, b := &s.shards[h&s.mask], &s.shards[s.hash(&k, own.Algorithm)&s.mask]
		if uintptr(unsafe.Pointer(a)) < uintptr(unsafe.Pointer(b)) {
			ovSh, ownSh, ovH = a, b, h
		}
	}
	r, err := takeKey(ctx, s, k, own, 1) // drains the raise
	require.NoError(t, err)
	require.True(t, r.Allowed)
	require.Equal(t, core.Warning, r.State)

	ownSh.mu.Lock()
	done := make(chan core.Result, 1)
	go func() {
		r, err := takeKey(ctx, s, k, own, 1)
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	// Wait until the Take holds the override's shard (100 failed tries in
	// a row, yielding between them); each time the shard is free, its
	// state must be as the drain left it.
	decided := false
	deadline := time.Now().Add(10 * time.Second)
	for fails := 0; fails < 100 && !decided && time.Now().Before(deadline); runtime.Gosched() {
		if !ovSh.mu.TryLock() {
			fails++
			continue
		}
		fails = 0
		i, found := ovSh.t.find(ovH)
		decided = !found || ovSh.t.slots[i].state().State != core.Warning
		ovSh.mu.Unlock()
	}
	ownSh.mu.Unlock()
	r = <-done
	require.False(t, decided, "the Take decided on the override's state while its own state's shard was locked")
	require.True(t, time.Now().Before(deadline), "the Take never held the override's shard")
	require.False(t, r.Allowed)
	require.Equal(t, core.Throttled, r.State)
	// The raise is spent until its end, 10 s away, and the own state
	// (drained, 2 an hour) admits one more 30 min after it was drained:
	// the wait of the key as a whole.
	require.Equal(t, 30*time.Minute, r.RetryAfter)
}

// takeKey is a one-op Take of k.
func takeKey(ctx context.Context, s *Store, k core.Key, l core.Limit, cost int64) (core.Result, error) {
	ops := [1]core.Op{{Key: k, Limit: l, Cost: cost}}
	var out [1]core.Result
	err := s.Take(ctx, ops[:], out[:])
	return out[0], err
}
