package lease_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/lease"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

// Over Redis, the takes of a TakeEach without a leased op reach the store
// below together: a batch of 100 costs one FCALL, as on the Redis store
// itself; the takes with a leased op beside them are decided by the
// layer; every take gets the answer Take gives its twin alone.
func TestTakeEachPassesTheRestTogether(t *testing.T) {
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	clock := limitertest.NewClock()
	rs, err := redisstore.New(c, redisstore.WithClock(clock.Now), redisstore.WithTimeout(10*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = rs.Close() })
	ls := newLease(t, rs, lease.WithClock(clock.Now))
	var _ core.EachTaker = ls
	ctx := context.Background()
	l := core.Per(10, time.Hour).WithAlgorithm(core.FixedWindow)
	base := limitertest.Key(t).Identity

	_, err = limitertest.TakeOne(ctx, ls, core.Key{Identity: base + "-load", Policy: "p"}, l, 1) // loads the code
	require.NoError(t, err)
	plain := eachTakes(base+"-plain", 100, l, 0)
	before := redistest.CommandCalls(t, c, "fcall")
	ls.TakeEach(ctx, plain)
	require.Equal(t, before+1, redistest.CommandCalls(t, c, "fcall"), "one FCALL for 100 takes without a lease")
	for i := range plain {
		require.NoError(t, plain[i].Err)
		require.True(t, plain[i].Out[0].Allowed)
		require.EqualValues(t, 9, plain[i].Out[0].Remaining)
	}

	for round := range 3 {
		mixed := eachTakes(base+"-mixed", 40, l, time.Minute)
		twins := eachTakes(base+"-twin", 40, l, time.Minute)
		passed := ls.Stats().PassedThrough
		ls.TakeEach(ctx, mixed)
		require.EqualValues(t, 20, ls.Stats().PassedThrough-passed, "round %d: the 20 takes without a lease passed down, no other", round)
		for i := range twins {
			twins[i].Err = ls.Take(ctx, twins[i].Ops, twins[i].Out)
		}
		for i := range mixed {
			require.NoError(t, mixed[i].Err)
			require.Equal(t, twins[i].Out[0].Allowed, mixed[i].Out[0].Allowed, "round %d take %d", round, i)
			require.Equal(t, twins[i].Out[0].Remaining, mixed[i].Out[0].Remaining, "round %d take %d", round, i)
		}
		clock.Advance(time.Millisecond)
	}
}

// eachTakes returns n one-op takes of cost 1 on keys prefix-0 ..., every
// other one leased for lease (none when lease is 0).
func eachTakes(prefix string, n int, l core.Limit, lease time.Duration) []core.Take {
	takes := make([]core.Take, n)
	for i := range takes {
		op := core.Op{Key: core.Key{Identity: prefix + "-" + strconv.Itoa(i), Policy: "p"}, Limit: l, Cost: 1}
		if i%2 == 1 {
			op.Lease = lease
		}
		takes[i] = core.Take{Ops: []core.Op{op}, Out: make([]core.Result, 1)}
	}
	return takes
}
