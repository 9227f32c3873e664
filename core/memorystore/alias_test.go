package memorystore_test

import (
	"context"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/memorystore"
)

// Under Fiber, request strings alias buffers that the next
// request overwrites. Every identity the store is given (Take of one op and
// of several, Refund, Reset, SetOverride) is such a string here: the buffer is
// overwritten after each call, and the store must behave as if the key had
// been copied.
func TestKeysBackedByReusedBuffers(t *testing.T) {
	c := &fixedClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s, err := memorystore.New(memorystore.WithClock(c.Now), memorystore.WithSweepInterval(0))
	require.NoError(t, err)
	defer s.Close()
	ctx := context.Background()
	buf := make([]byte, 64)
	// aliased returns key as a string over buf, valid until the next call.
	aliased := func(key string) string {
		n := copy(buf, key)
		return unsafe.String(&buf[0], n)
	}
	scrub := func() {
		for i := range buf {
			buf[i] = 'x'
		}
	}
	for _, a := range limitertest.Algorithms {
		l := core.PerMinute(3).WithAlgorithm(a)
		alice, bob := "alice:"+a.String(), "bob:"+a.String()
		key := func(id string) core.Key { return core.Key{Identity: id, Policy: "p"} }
		// An override set through an aliased key: blocked for alice only.
		require.NoError(t, s.SetOverride(ctx, key(aliased(alice)), core.Override{Until: c.now.Add(time.Minute)}))
		scrub()
		// The buffer now reads bob's key, then garbage: neither is blocked.
		r, err := limitertest.TakeOne(ctx, s, key(aliased(bob)), l, 1)
		require.NoError(t, err)
		require.True(t, r.Allowed, "%s: bob is not blocked", a)
		scrub()
		r, err = limitertest.TakeOne(ctx, s, key(alice), l, 1)
		require.NoError(t, err)
		require.False(t, r.Allowed, "%s: alice's override survived the buffer's reuse", a)
		require.NoError(t, s.ClearOverride(ctx, key(aliased(alice))))
		scrub()
		// State taken through aliased keys stays with the key, not the buffer.
		for range 3 {
			_, err = limitertest.TakeOne(ctx, s, key(aliased(bob)), l, 1)
			require.NoError(t, err)
			scrub()
		}
		r, err = limitertest.TakeOne(ctx, s, key(bob), l, 0)
		require.NoError(t, err)
		require.False(t, r.Allowed, "%s: bob's three requests counted", a)
		out := make([]core.Result, 2)
		require.NoError(t, s.Take(ctx, []core.Op{{Key: key(aliased(alice)), Limit: l, Cost: 3}, {Key: key("carol:" + a.String()), Limit: l, Cost: 1}}, out))
		scrub()
		require.True(t, out[0].Allowed)
		r, err = limitertest.TakeOne(ctx, s, key(alice), l, 1)
		require.NoError(t, err)
		require.False(t, r.Allowed, "%s: alice's batch counted", a)
		require.NoError(t, s.Reset(ctx, key(aliased(alice)), l))
		scrub()
		r, err = limitertest.TakeOne(ctx, s, key(alice), l, 1)
		require.NoError(t, err)
		require.True(t, r.Allowed, "%s: alice reset", a)
	}
}
