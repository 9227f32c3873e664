package engine_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/lease"
	"github.com/sluicehq/sluice/core/redisstore"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rules"
)

const benchRules = `
rules:
  - name: per-user
    dimension: user
    endpoints: [/api/**]
    algorithm: gcra
    rate: 1000000000
    period: 1s
    burst: 1000000000
`

// BenchmarkCheck is one check under one rule on the memory store, from
// parallel goroutines, over 1024 identifiers.
func BenchmarkCheck(b *testing.B) {
	e := newEngine(b, memStore(b), benchRules)
	ids := make([]string, 1024)
	for i := range ids {
		ids[i] = "user-" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			r, err := e.Check(context.Background(), engine.Check{Dimension: "user", Identifier: ids[i&1023], Endpoint: "/api/orders", Cost: 1})
			if err != nil || !r.Allowed {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkCheckBatch10 is a batch of 10 independent checks (or one
// all-or-nothing decision of 10) per op; checks/s is 10 × ops/s.
func BenchmarkCheckBatch10(b *testing.B) {
	for _, aon := range []bool{false, true} {
		b.Run("all_or_nothing="+strconv.FormatBool(aon), func(b *testing.B) {
			e := newEngine(b, memStore(b), benchRules)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				cs := make([]engine.Check, 10)
				n := 0
				for pb.Next() {
					for k := range cs {
						n++
						cs[k] = engine.Check{Dimension: "user", Identifier: "user-" + strconv.Itoa(n&1023), Endpoint: "/api/orders", Cost: 1}
					}
					_, errs := e.CheckBatch(context.Background(), cs, aon)
					for _, err := range errs {
						if err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		})
	}
}

// BenchmarkDescriptors is an Envoy request of two descriptors on the
// memory store.
func BenchmarkDescriptors(b *testing.B) {
	s, err := rules.Parse("rules.yaml", []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: path
    value: /a
    rate_limit: {unit: second, requests_per_unit: 1000000000}
`))
	if err != nil {
		b.Fatal(err)
	}
	e, err := engine.New(context.Background(), memStore(b), newSource(s))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		n := 0
		ds := []engine.Descriptor{
			{Entries: []rules.Entry{{Key: "remote_address"}}, Cost: 1},
			{Entries: []rules.Entry{{Key: "path", Value: "/a"}}, Cost: 1},
		}
		for pb.Next() {
			n++
			ds[0].Entries[0].Value = "10.0.0." + strconv.Itoa(n&255)
			r, err := e.Descriptors(context.Background(), "edge", ds)
			if err != nil || !r.Allowed {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkCheckRedis is one check under one rule on a real redis-server,
// from 64 goroutines (the store pipelines their calls).
func BenchmarkCheckRedis(b *testing.B) {
	e := newEngine(b, redisStore(b, redistest.StartServer(b).Addr), benchRules)
	b.ReportAllocs()
	b.SetParallelism(32)
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := "user-" + strconv.Itoa(int(n.Add(1)&1023))
			r, err := e.Check(context.Background(), engine.Check{Dimension: "user", Identifier: id, Endpoint: "/api/orders", Cost: 1})
			if err != nil || !r.Allowed {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDescriptorsGuardedRedis is ratelimitd's ShouldRateLimit on
// Redis without the protocol: one descriptor of 1000 users under a fixed
// window, decided on the Redis store behind the guard with one timeout (as
// `ratelimitd serve --redis` builds them), from 64 goroutines, each call
// under a deadline as a gRPC call has one.
func BenchmarkDescriptorsGuardedRedis(b *testing.B) {
	rs := redisStore(b, redistest.StartServer(b).Addr, redisstore.WithTimeout(time.Second))
	g, err := guard.New(rs, guard.WithTimeout(time.Second), guard.WithFailClosed(0))
	if err != nil {
		b.Fatal(err)
	}
	s, err := rules.Parse("rules.yaml", []byte(`
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000}
`))
	if err != nil {
		b.Fatal(err)
	}
	e, err := engine.New(context.Background(), g, newSource(s))
	if err != nil {
		b.Fatal(err)
	}
	users := make([]string, 1000)
	for i := range users {
		users[i] = strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.SetParallelism(32)
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		ds := []engine.Descriptor{{Entries: []rules.Entry{{Key: "user"}}, Cost: 1}}
		for pb.Next() {
			ds[0].Entries[0].Value = users[n.Add(1)%int64(len(users))]
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			r, err := e.Descriptors(ctx, "bench", ds)
			cancel()
			if err != nil || !r.Allowed {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkCheckBatch100 is a batch of 100 checks of 100 identifiers (a
// new set each op) decided one by one or all or nothing through
// CheckBatchFunc, as ratelimitd's CheckRateLimitBatch decides it: on the
// memory store one after the other, on Redis (behind the guard and the
// lease layer, as `ratelimitd serve --redis` builds them) in rounds with
// parallelism 16. Each call runs under a context that can be canceled, as
// a gRPC call's; decisions/s is 100 × ops/s.
func BenchmarkCheckBatch100(b *testing.B) {
	for _, c := range []struct {
		name  string
		redis bool
		aon   bool
	}{{"memory", false, false}, {"memory-all-or-nothing", false, true}, {"redis", true, false}} {
		b.Run(c.name, func(b *testing.B) {
			var e *engine.Engine
			if c.redis {
				e = newEngine(b, guardedRedis(b), benchRules, engine.WithBatchParallelism(16))
			} else {
				e = newEngine(b, memStore(b), benchRules)
			}
			sets := make([][]engine.Check, 64)
			for s := range sets {
				sets[s] = make([]engine.Check, 100)
				for k := range sets[s] {
					sets[s][k] = engine.Check{Dimension: "user", Identifier: "user-" + strconv.Itoa(s*100+k), Endpoint: "/api/orders", Cost: 1}
				}
			}
			var failed error
			answer := func(_ int, _ *engine.Result, err error) {
				if err != nil {
					failed = err
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				e.CheckBatchFunc(ctx, sets[i%len(sets)], c.aon, answer)
				if failed != nil {
					b.Fatal(failed)
				}
			}
			b.ReportMetric(100*float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}

// guardedRedis is a Redis store on a real redis-server behind the guard
// and the lease layer, as ratelimitd builds it.
func guardedRedis(b *testing.B) core.Store {
	rs := redisStore(b, redistest.StartServer(b).Addr, redisstore.WithTimeout(time.Second))
	g, err := guard.New(rs, guard.WithTimeout(time.Second))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { g.Close() })
	ls, err := lease.New(g)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ls.Close() })
	return ls
}
