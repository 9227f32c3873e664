package redisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redistest"
)

// An override's key expires at its Until to the millisecond (rounded up),
// never before it; setting the same override again leaves its value (its
// id, hence its state) and its expiry as they are, while another Until
// replaces both.
func TestOverrideKeyExpiresAtItsUntil(t *testing.T) {
	ctx := context.Background()
	client := redistest.StartServer(t).Client(t)
	s := newStore(t, client)
	k := core.Key{Identity: "ann", Policy: "orders"}
	ovr := strings.TrimSuffix(s.Key(k, core.TokenBucket), "tb") + "ovr"
	until := time.Now().Add(time.Hour).Truncate(time.Second).Add(700*time.Millisecond + 250*time.Microsecond)
	expireAt := func() int64 {
		t.Helper()
		v, err := client.Do(ctx, "PEXPIRETIME", ovr).Int64()
		require.NoError(t, err)
		return v
	}
	value := func() string {
		t.Helper()
		v, err := client.Get(ctx, ovr).Result()
		require.NoError(t, err)
		return v
	}
	for _, lim := range []core.Limit{core.PerMinute(10), {}} { // a limit, then a block
		o := core.Override{Limit: lim, Until: until}
		require.NoError(t, s.SetOverride(ctx, k, o))
		require.Equal(t, until.UnixMilli()+1, expireAt(), "%v: not before Until, to the ms", lim)
		v := value()
		require.NoError(t, s.SetOverride(ctx, k, o))
		require.Equal(t, v, value(), "%v: the same override set again keeps its value (and id)", lim)
		require.Equal(t, until.UnixMilli()+1, expireAt())
		// Another Until replaces it.
		later := until.Add(time.Second)
		require.NoError(t, s.SetOverride(ctx, k, core.Override{Limit: lim, Until: later}))
		require.Equal(t, later.UnixMilli()+1, expireAt())
		require.NotEqual(t, v, value())
		require.NoError(t, s.ClearOverride(ctx, k))
	}
}
