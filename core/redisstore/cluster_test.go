package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

// Four store instances, each with its own cluster client, and 64 goroutines
// hammering one key: exactly the capacity is admitted, for every algorithm.
// Then every node is scanned: no limiter key lives without a TTL, and no
// call ever met CROSSSLOT.
func TestClusterDistributedExactness(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	stores := make([]*redisstore.Store, 4)
	for i := range stores {
		stores[i] = newStore(t, cluster.Client(t), redisstore.WithTimeout(2*time.Second))
	}
	ctx := context.Background()
	var crossSlot atomic.Int64
	for _, a := range limitertest.Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			l := core.Per(200, time.Hour).WithAlgorithm(a)
			key := limitertest.Key(t).Identity
			var admitted atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, 64)
			for g := range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					s := stores[g%len(stores)]
					for range 10 {
						r, err := takeID(ctx, s, key, l, 1)
						if err != nil {
							if strings.Contains(err.Error(), "CROSSSLOT") {
								crossSlot.Add(1)
							}
							errs <- err
							return
						}
						if r.Allowed {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("Take: %v", err)
			}
			require.Equal(t, int64(200), admitted.Load(), "admitted out of 640")
		})
	}
	// Many identities too, so that every node holds keys.
	for i := range 300 {
		_, err := takeID(ctx, stores[i%4], fmt.Sprintf("spread-%d", i), core.PerMinute(5).WithAlgorithm(limitertest.Algorithms[i%6]), 1)
		require.NoError(t, err)
	}
	require.Zero(t, crossSlot.Load())
	nodesWithKeys := 0
	for _, addr := range cluster.Addrs() {
		node := redis.NewClient(&redis.Options{Addr: addr})
		keys, err := node.Keys(ctx, "sluice:*").Result()
		require.NoError(t, err)
		if len(keys) > 0 {
			nodesWithKeys++
		}
		iter := node.Scan(ctx, 0, "sluice:*", 100).Iterator()
		for iter.Next(ctx) {
			ttl, err := node.PTTL(ctx, iter.Val()).Result()
			require.NoError(t, err)
			require.Greater(t, ttl, time.Duration(0), "key %s on %s has no TTL", iter.Val(), addr)
		}
		require.NoError(t, iter.Err())
		calls := scriptCalls(t, node)
		require.Positive(t, calls["fcall"], "the library was loaded on %s", addr)
		require.Zero(t, calls["evalsha"]+calls["eval"], "no script on %s", addr)
		node.Close()
	}
	require.Equal(t, 3, nodesWithKeys, "keys spread over every master")
}

// FUNCTION FLUSH (or SCRIPT FLUSH, for a store on scripts) in the middle of
// traffic costs nothing; a restart costs only the calls made while the
// server was down. A store on functions keeps using them.
func TestFlushAndRestart(t *testing.T) {
	srv := redistest.StartServer(t)
	client := srv.Client(t)
	ctx := context.Background()
	for _, functions := range []bool{true, false} {
		for _, pipelined := range []bool{true, false} {
			t.Run(fmt.Sprintf("functions=%v/pipelined=%v", functions, pipelined), func(t *testing.T) {
				opts := []redisstore.Option{redisstore.WithTimeout(time.Second), redisstore.WithFunctions(functions)}
				if !pipelined {
					opts = append(opts, redisstore.WithPipelining(0, 0))
				}
				s := newStore(t, client, opts...)
				flush := func() error { return client.ScriptFlush(ctx).Err() }
				if functions {
					flush = func() error { return client.FunctionFlush(ctx).Err() }
				}
				l := core.PerSecond(1_000_000)
				var calls atomic.Int64 // every Take of the traffic so far
				traffic := func(n int) (fails int) {
					var wg sync.WaitGroup
					var failed atomic.Int64
					for g := range 16 {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for i := range n {
								if _, err := takeID(ctx, s, fmt.Sprintf("k%d-%d", g, i%7), l, 1); err != nil {
									failed.Add(1)
								}
								calls.Add(1)
							}
						}()
					}
					wg.Wait()
					return int(failed.Load())
				}
				require.Zero(t, traffic(50))
				// Flushes while traffic runs: not one failure.
				done := make(chan int)
				var finished atomic.Bool
				go func() { f := traffic(200); finished.Store(true); done <- f }()
				for range 5 {
					require.NoError(t, flush())
					// The next flush once the traffic has run on the
					// flushed server (16 more calls), not after a guessed
					// time.
					n := calls.Load()
					require.Eventually(t, func() bool { return calls.Load() >= n+16 || finished.Load() },
						10*time.Second, 100*time.Microsecond)
				}
				require.Zero(t, <-done, "failures across the flushes")
				before := scriptCalls(t, client)
				require.Zero(t, traffic(20))
				after := scriptCalls(t, client)
				// Pipelined one-op calls may go several to a call.
				if functions {
					require.Greater(t, after["fcall"], before["fcall"], "still on functions")
					require.LessOrEqual(t, after["fcall"], before["fcall"]+16*20)
					require.Equal(t, before["evalsha"]+before["eval"], after["evalsha"]+after["eval"], "no script")
				} else {
					require.Greater(t, after["evalsha"], before["evalsha"], "on scripts")
					require.LessOrEqual(t, after["evalsha"], before["evalsha"]+16*20)
					require.Equal(t, before["fcall"], after["fcall"], "no function called")
				}
				// A restart: calls fail while the server is down, then every
				// call succeeds again without any action of ours.
				srv.Kill()
				_, err := takeID(ctx, s, "down", l, 1)
				require.Error(t, err)
				require.NotContains(t, err.Error(), "panic")
				srv.Restart(t)
				require.Eventually(t, func() bool { _, err := takeID(ctx, s, "up", l, 1); return err == nil }, 5*time.Second, 10*time.Millisecond)
				require.Zero(t, traffic(50), "failures after the restart window")
			})
		}
	}
}

// scriptCalls returns the calls of FCALL, EVALSHA and EVAL the server has
// run (INFO commandstats), by lower-case command name.
func scriptCalls(t *testing.T, c *redis.Client) map[string]int64 {
	t.Helper()
	text, err := c.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	out := map[string]int64{}
	for _, line := range strings.Split(text, "\r\n") {
		name, stats, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if !ok || !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(stats, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		require.NoError(t, err, line)
		out[name] = n
	}
	return out
}

// A Sentinel failover during traffic: the store follows the new master by
// itself, and the limit keeps holding on it.
func TestSentinelFailover(t *testing.T) {
	sen := redistest.StartSentinel(t)
	s := newStore(t, sen.Client(t), redisstore.WithTimeout(time.Second))
	ctx := context.Background()
	stop := make(chan struct{})
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := takeID(ctx, s, fmt.Sprintf("f%d-%d", g, i%5), core.PerSecond(1_000_000), 1); err != nil {
					failed.Add(1)
					time.Sleep(5 * time.Millisecond) // back off while the real servers fail over
				} else {
					ok.Add(1)
				}
			}
		}()
	}
	// Traffic is flowing before the failover.
	require.Eventually(t, func() bool { return ok.Load() >= 100 }, 10*time.Second, time.Millisecond)
	before, err := sen.CurrentMaster(ctx)
	require.NoError(t, err)
	sen.Failover(t)
	after, err := sen.CurrentMaster(ctx)
	require.NoError(t, err)
	require.NotEqual(t, before, after)
	okAtFailover := ok.Load()
	require.Eventually(t, func() bool { return ok.Load() > okAtFailover+100 }, 10*time.Second, 10*time.Millisecond, "traffic resumes on the new master")
	close(stop)
	wg.Wait()
	// The limit holds on the new master.
	l := core.PerMinute(3)
	key := limitertest.Key(t).Identity
	for i := range 4 {
		r, err := takeID(ctx, s, key, l, 1)
		require.NoError(t, err)
		require.Equal(t, i < 3, r.Allowed)
	}
	t.Logf("calls ok %d, failed during the failover %d", ok.Load(), failed.Load())
}

func TestErrorsAreWrappedNeverPanics(t *testing.T) {
	srv := redistest.StartServer(t)
	client := srv.Client(t)
	s := newStore(t, client, redisstore.WithTimeout(200*time.Millisecond))
	ctx := context.Background()
	// A key of the wrong type: Redis answers WRONGTYPE.
	key := limitertest.Key(t).Identity
	require.NoError(t, client.HSet(ctx, s.Key(keyOf(key), core.TokenBucket), "x", 1).Err())
	_, err := takeID(ctx, s, key, core.PerSecond(1), 1)
	require.Error(t, err)
	require.Contains(t, err.Error(), "redisstore:")
	// A caller deadline already passed.
	dead, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel()
	_, err = takeID(dead, s, limitertest.Key(t).Identity, core.PerSecond(1), 1)
	require.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
	// The server stalls longer than the timeout: the call returns at the
	// timeout whether or not the client honours context deadlines.
	srv2 := redistest.StartServer(t)
	for _, honours := range []bool{false, true} {
		for _, pipelining := range []int{0, 2} {
			client := srv2.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = honours })
			s2 := newStore(t, client, redisstore.WithTimeout(100*time.Millisecond), redisstore.WithPipelining(pipelining, pipelining*64))
			admin := srv2.Client(t)
			// CLIENT PAUSE holds every client's commands for 500 ms, and
			// its OK says that the stall has begun (a DEBUG SLEEP answers
			// nothing until it ends, so a test could only guess when).
			require.NoError(t, admin.Do(ctx, "CLIENT", "PAUSE", "500").Err())
			start := time.Now()
			_, err = takeID(ctx, s2, limitertest.Key(t).Identity, core.PerSecond(1), 1)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.Less(t, time.Since(start), 400*time.Millisecond, "honours %v pipelining %d", honours, pipelining)
			require.NoError(t, admin.Ping(ctx).Err(), "the stall ended") // the reply comes when it ends
		}
	}
	// Closed.
	require.NoError(t, s.Close())
	_, err = takeID(ctx, s, "k", core.PerSecond(1), 1)
	require.ErrorIs(t, err, core.ErrClosed)
}

func TestKeysAreSafeInAHashTag(t *testing.T) {
	s, err := redisstore.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), redisstore.WithPrefix("rl"))
	require.NoError(t, err)
	cases := map[string]string{
		"ip:1.2.3.4":  "rl:{ip:1.2.3.4}:tb",
		"}{":          "rl:{%7D%7B}:tb",
		"a%b#c":       "rl:{a%25b%23c}:tb",
		"user:{evil}": "rl:{user:%7Bevil%7D}:tb",
	}
	for in, want := range cases {
		require.Equal(t, want, s.Key(core.Key{Identity: in}, core.TokenBucket))
		require.Equal(t, redistest.Slot(want), redistest.Slot(strings.Replace(want, ":tb", ":gc", 1)), "one slot per identity")
	}
	require.Equal(t, "rl:{ip:1.2.3.4}:per-second:tb", s.Key(core.Key{Identity: "ip:1.2.3.4", Policy: "per-second"}, core.TokenBucket))
	require.Equal(t, redistest.Slot("rl:{ip:1.2.3.4}:per-second:tb"), redistest.Slot("rl:{ip:1.2.3.4}:per-hour:gc"))
	long := s.Key(core.Key{Identity: strings.Repeat("x", 5000)}, core.GCRA)
	require.Less(t, len(long), 40, "a long identifier is hashed, not stored raw")
	require.NotEqual(t, long, s.Key(core.Key{Identity: strings.Repeat("x", 4999) + "y"}, core.GCRA))
	_, err = redisstore.New(nil)
	require.Error(t, err)
	_, err = redisstore.New(redis.NewClient(&redis.Options{}), redisstore.WithPrefix("a{b"))
	require.ErrorContains(t, err, "WithPrefix")
}

// Two policies on different identities (different slots of the Cluster),
// hammered by 64 goroutines through 4 store instances: exactly as many
// requests are admitted as all-or-nothing allows, and the looser policy has
// consumed exactly that many: no quota leaks through denied requests.
func TestClusterAllOrNothingNoLeak(t *testing.T) {
	cluster := shared.Cluster(t)
	stores := make([]*redisstore.Store, 4)
	for i := range stores {
		stores[i] = newStore(t, cluster.Client(t), redisstore.WithTimeout(5*time.Second))
	}
	ctx := context.Background()
	for _, tight := range []int{0, 1} {
		t.Run(fmt.Sprintf("tight=%d", tight), func(t *testing.T) {
			id := limitertest.Key(t).Identity
			ops := []core.Op{
				{Key: core.Key{Identity: "ip:" + id, Policy: "per-ip"}, Limit: core.PerHour(100), Cost: 1},
				{Key: core.Key{Identity: "user:" + id, Policy: "per-user"}, Limit: core.PerHour(100).WithAlgorithm(core.SlidingWindowCounter), Cost: 1},
			}
			ops[tight].Limit = core.PerHour(60).WithAlgorithm(ops[tight].Limit.Algorithm)
			require.NotEqual(t, redistest.Slot(stores[0].Key(ops[0].Key, core.TokenBucket)), redistest.Slot(stores[0].Key(ops[1].Key, core.TokenBucket)), "the identities must live in different slots")
			var admitted atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, 64)
			for g := range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					out := make([]core.Result, 2)
					for range 5 {
						if err := stores[g%4].Take(ctx, ops, out); err != nil {
							errs <- err
							return
						}
						if out[0].Allowed && out[1].Allowed {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			require.Equal(t, int64(60), admitted.Load())
			loose := ops[1-tight]
			r, err := limitertest.TakeOne(ctx, stores[0], loose.Key, loose.Limit, 0)
			require.NoError(t, err)
			requireGivenBack(t, loose, 40, r.Remaining)
		})
	}
}
