package memorystore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
)

// takeID is a one-op Take of the identity id, without a policy.
func takeID(ctx context.Context, s core.Store, id string, l core.Limit, cost int64) (core.Result, error) {
	return limitertest.TakeOne(ctx, s, core.Key{Identity: id}, l, cost)
}

// A Key's two parts are hashed in turn, never joined: keys of any length
// (longer than maphash's buffer too) are decided, refunded, reset and
// overridden on their own state, and another policy of the same identity
// is another key.
func TestKeyParts(t *testing.T) {
	ctx := context.Background()
	l := core.PerMinute(10)
	cases := []struct{ name, identity, policy string }{
		{"short", "203.0.113.7", "per-ip"},
		{"no policy", "203.0.113.7", ""},
		{"longer than maphash's buffer", strings.Repeat("b", 300), strings.Repeat("p", 64)},
		{"NUL in the identity", "a\x00b", "c"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			now := int64(1_700_000_000_000_000)
			s := newTestStore(t, &now)
			k := core.Key{Identity: tc.identity, Policy: tc.policy}
			want := int64(10)
			take := func() {
				t.Helper()
				res, err := limitertest.TakeOne(ctx, s, k, l, 1)
				require.NoError(t, err)
				want--
				require.True(t, res.Allowed)
				require.Equal(t, want, res.Remaining)
			}
			take()
			take()
			// Another policy of the same identity is another key.
			res, err := limitertest.TakeOne(ctx, s, core.Key{Identity: tc.identity, Policy: tc.policy + "x"}, l, 0)
			require.NoError(t, err)
			require.Equal(t, int64(10), res.Remaining)

			require.NoError(t, s.Refund(ctx, core.Admission{Key: k, Limit: l, Cost: 1, At: res.At}))
			want++
			take()

			require.NoError(t, s.SetOverride(ctx, k, core.Override{Until: time.UnixMicro(now).Add(time.Minute)}))
			res, err = limitertest.TakeOne(ctx, s, k, l, 1)
			require.NoError(t, err)
			require.False(t, res.Allowed, "the key's block applies")
			require.NoError(t, s.ClearOverride(ctx, k))

			require.NoError(t, s.Reset(ctx, k, l))
			want = 10
			take()
		})
	}
}

// A Take of one op on an existing key allocates nothing, its ops and out
// on the caller's stack (the store keeps neither).
func TestTakeOneOpDoesNotAllocate(t *testing.T) {
	now := int64(1_700_000_000_000_000)
	s := newTestStore(t, &now)
	ctx := context.Background()
	l := core.PerSecond(1_000_000)
	ops := [1]core.Op{{Key: core.Key{Identity: "203.0.113.7", Policy: "per-ip"}, Limit: l, Cost: 1}}
	var out [1]core.Result
	require.NoError(t, s.Take(ctx, ops[:], out[:]))
	allocs := testing.AllocsPerRun(1000, func() {
		now++
		if err := s.Take(ctx, ops[:], out[:]); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs)
}

// A Take of a few ops (up to smallGroup) on existing keys allocates
// nothing either, nor does one op under an override (its own state read
// beside it); a larger group allocates its bookkeeping only.
func TestSmallTakesDoNotAllocate(t *testing.T) {
	now := int64(1_700_000_000_000_000)
	s := newTestStore(t, &now)
	ctx := context.Background()
	l := core.PerSecond(1_000_000)
	ops := make([]core.Op, smallGroup+1)
	for i := range ops {
		ops[i] = core.Op{Key: core.Key{Identity: "203.0.113.7", Policy: fmt.Sprintf("p%d", i)}, Limit: l, Cost: 1}
	}
	out := make([]core.Result, len(ops))
	take := func(n int) float64 {
		require.NoError(t, s.Take(ctx, ops[:n], out[:n]))
		return testing.AllocsPerRun(200, func() {
			now++
			if err := s.Take(ctx, ops[:n], out[:n]); err != nil {
				t.Fatal(err)
			}
		})
	}
	for n := 1; n <= smallGroup; n++ {
		require.Zero(t, take(n), "%d ops", n)
	}
	require.LessOrEqual(t, take(smallGroup+1), 2.0, "%d ops", smallGroup+1)
	require.NoError(t, s.SetOverride(ctx, ops[0].Key, core.Override{Limit: core.PerSecond(2_000_000), Until: time.UnixMicro(now).Add(time.Hour)}))
	require.Zero(t, take(1), "one op under an override")
	require.True(t, out[0].Applied != nil, "the override applied")
}
