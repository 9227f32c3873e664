package memorystore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
)

var _ core.SplitKeyStore = (*Store)(nil)

// TakeSplit(identity, policy) is Take(identity+"\x00"+policy): the same
// state, whichever of the two counts, and the joined key's Reset, Refund
// and overrides apply to it. Keys too long for the stack buffer too.
func TestTakeSplitIsTakeOfTheJoinedKey(t *testing.T) {
	ctx := context.Background()
	l := core.PerMinute(10)
	cases := []struct{ name, identity, policy string }{
		{"short", "203.0.113.7", "per-ip"},
		{"at the buffer size", strings.Repeat("a", splitMax-1-len("per-ip")), "per-ip"},
		{"longer than the buffer", strings.Repeat("b", 3*splitMax), strings.Repeat("p", 64)},
		{"NUL in the identity", "a\x00b", "c"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			now := int64(1_700_000_000_000_000)
			s := newTestStore(t, &now)
			key := tc.identity + "\x00" + tc.policy
			want := int64(10)
			take := func(split bool) {
				t.Helper()
				var res core.Result
				var err error
				if split {
					res, err = s.TakeSplit(ctx, tc.identity, tc.policy, l, 1)
				} else {
					res, err = s.Take(ctx, key, l, 1)
				}
				require.NoError(t, err)
				want--
				require.True(t, res.Allowed)
				require.Equal(t, want, res.Remaining)
			}
			take(true)
			take(false)
			take(true)
			// Another policy of the same identity is another key.
			res, err := s.TakeSplit(ctx, tc.identity, tc.policy+"x", l, 0)
			require.NoError(t, err)
			require.Equal(t, int64(10), res.Remaining)

			require.NoError(t, s.Refund(ctx, key, l, 1, res.At, 0))
			want++
			take(true)

			require.NoError(t, s.SetOverride(ctx, key, core.Override{Until: time.UnixMicro(now).Add(time.Minute)}))
			res, err = s.TakeSplit(ctx, tc.identity, tc.policy, l, 1)
			require.NoError(t, err)
			require.False(t, res.Allowed, "the joined key's block applies")
			require.NoError(t, s.ClearOverride(ctx, key))

			require.NoError(t, s.Reset(ctx, key, l))
			want = 10
			take(true)
		})
	}
}

func TestTakeSplitDoesNotAllocate(t *testing.T) {
	now := int64(1_700_000_000_000_000)
	s := newTestStore(t, &now)
	ctx := context.Background()
	l := core.PerSecond(1_000_000)
	_, err := s.TakeSplit(ctx, "203.0.113.7", "per-ip", l, 1)
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(1000, func() {
		now++
		if _, err := s.TakeSplit(ctx, "203.0.113.7", "per-ip", l, 1); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs)
}
