package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

func usedMemory(b *testing.B, c *redis.Client) int64 {
	info, err := c.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	b.Fatal("no used_memory in INFO")
	return 0
}

// BenchmarkMemoryPerIdentity reports the growth of Redis's used_memory per
// identity after 100k identities ("ip:10.x.y.z") took one request each.
//
//	go test ./core/redisstore -run XXX -bench MemoryPerIdentity -benchtime 1x
func BenchmarkMemoryPerIdentity(b *testing.B) {
	const n = 100_000
	srv := redistest.StartServer(b)
	client := srv.Client(b)
	for _, a := range limitertest.Algorithms {
		b.Run(a.String(), func(b *testing.B) {
			for b.Loop() {
				ctx := context.Background()
				client.FlushAll(ctx) // synchronous: nothing is freed during the measurement
				s, _ := redisstore.New(client, redisstore.WithTimeout(5*time.Second))
				before := usedMemory(b, client)
				l := core.PerHour(100).WithAlgorithm(a) // every key outlives the run
				var wg sync.WaitGroup
				for g := range 64 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := g; i < n; i += 64 {
							key := fmt.Sprintf("ip:10.%d.%d.%d", i>>16, i>>8&255, i&255)
							if _, err := takeID(ctx, s, key, l, 1); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				if size := client.DBSize(ctx).Val(); size != n {
					b.Fatalf("DBSIZE %d, want %d", size, n)
				}
				b.ReportMetric(float64(usedMemory(b, client)-before)/n, "bytes/identity")
			}
		})
	}
}

// BenchmarkTake64Callers measures decisions per second with 64 concurrent
// callers on one local Redis, with and without automatic pipelining.
//
//	go test ./core/redisstore -run XXX -bench Take64Callers
func BenchmarkTake64Callers(b *testing.B) {
	srv := redistest.StartServer(b)
	for _, mode := range []struct {
		name string
		opts []redisstore.Option
	}{{"pipelined", nil}, {"unpipelined", []redisstore.Option{redisstore.WithPipelining(0, 0)}}} {
		b.Run(mode.name, func(b *testing.B) {
			client := srv.Client(b, func(o *redis.Options) { o.PoolSize = 64 })
			s, _ := redisstore.New(client, append(mode.opts, redisstore.WithTimeout(5*time.Second))...)
			ctx := context.Background()
			l := core.PerSecond(1_000_000_000)
			b.SetParallelism(32) // 64 goroutines on 2 CPUs
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					i++
					if _, err := takeID(ctx, s, "user:"+strconv.Itoa(i%1000), l, 1); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
		})
	}
}

// BenchmarkRawEvalSha64Callers is the yardstick: go-redis running a script of
// the same size with EVALSHA, one call per caller, 64 callers.
func BenchmarkRawEvalSha64Callers(b *testing.B) {
	srv := redistest.StartServer(b)
	client := srv.Client(b, func(o *redis.Options) { o.PoolSize = 64 })
	script := redis.NewScript(`local v = redis.call('GET', KEYS[1]) or 0
redis.call('SET', KEYS[1], v + 1, 'PX', 60000)
return {1, 2, 3, 4, 0}`)
	ctx := context.Background()
	b.SetParallelism(32)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			if err := script.Run(ctx, client, []string{"user:" + strconv.Itoa(i%1000)}).Err(); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
}

// BenchmarkThreePolicies compares a request matched by three policies of one
// identity, decided in one Take of three ops (one script, one round trip), with the
// same three policies checked one after another, in the same run.
//
//	go test ./core/redisstore -run XXX -bench ThreePolicies
func BenchmarkThreePolicies(b *testing.B) {
	srv := redistest.StartServer(b)
	limits := []core.Limit{core.PerSecond(1_000_000), core.Per(1_000_000, 10*time.Second).WithAlgorithm(core.SlidingWindowCounter), core.PerHour(1_000_000_000).WithAlgorithm(core.FixedWindow)}
	for _, mode := range []string{"one-Take", "three-Takes"} {
		for _, callers := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/callers=%d", mode, callers), func(b *testing.B) {
				client := srv.Client(b, func(o *redis.Options) { o.PoolSize = 64; o.ContextTimeoutEnabled = true })
				s, _ := redisstore.New(client, redisstore.WithTimeout(5*time.Second))
				ctx := context.Background()
				b.SetParallelism((callers + 1) / 2)
				start := time.Now()
				b.RunParallel(func(pb *testing.PB) {
					out := make([]core.Result, 3)
					i := 0
					for pb.Next() {
						i++
						id := "user:" + strconv.Itoa(i%1000)
						ops := []core.Op{{Key: core.Key{Identity: id, Policy: "a"}, Limit: limits[0], Cost: 1}, {Key: core.Key{Identity: id, Policy: "b"}, Limit: limits[1], Cost: 1}, {Key: core.Key{Identity: id, Policy: "c"}, Limit: limits[2], Cost: 1}}
						if mode == "one-Take" {
							if err := s.Take(ctx, ops, out); err != nil {
								b.Error(err)
								return
							}
							continue
						}
						for _, op := range ops {
							if _, err := limitertest.TakeOne(ctx, s, op.Key, op.Limit, op.Cost); err != nil {
								b.Error(err)
								return
							}
						}
					}
				})
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "requests/s")
			})
		}
	}
}

// BenchmarkTakeEach64 measures what the client spends on a decision of a
// batch: one TakeEach of 64 one-op takes of hot identities (one decideMany
// call on a standalone server), per decision (ns/op, allocs/op). Under
// callgrind it gives the instructions this process runs per decision
// (two runs of N₁ and N₂ decisions, the difference ÷ (N₂ − N₁)):
//
// SLUICE_BENCH_REDIS names a redis-server to use instead of one the
// benchmark starts (callgrind stops at the signal of a child process):
//
//	go test -c ./core/redisstore && redis-server --port 6399 --save '' &
//	SLUICE_BENCH_REDIS=127.0.0.1:6399 GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind ./redisstore.test -test.run XXX -test.bench TakeEach64 -test.benchtime 6400x -test.cpu 1
func BenchmarkTakeEach64(b *testing.B) {
	var client *redis.Client
	if addr := os.Getenv("SLUICE_BENCH_REDIS"); addr != "" {
		client = redis.NewClient(&redis.Options{Addr: addr})
		b.Cleanup(func() { _ = client.Close() })
	} else {
		client = redistest.StartServer(b).Client(b)
	}
	s, err := redisstore.New(client, redisstore.WithTimeout(5*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	l := core.PerSecond(1_000_000_000).WithAlgorithm(core.FixedWindow)
	takes := make([]core.Take, 64)
	for i := range takes {
		takes[i] = core.Take{Ops: []core.Op{{Key: core.Key{Identity: "user:" + strconv.Itoa(i), Policy: "p"}, Limit: l, Cost: 1}}, Out: make([]core.Result, 1)}
	}
	s.TakeEach(ctx, takes) // the library loaded, the keys made
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n += len(takes) {
		s.TakeEach(ctx, takes)
		for i := range takes {
			if takes[i].Err != nil || !takes[i].Out[0].Allowed {
				b.Fatal(takes[i].Err, takes[i].Out[0])
			}
		}
	}
}
