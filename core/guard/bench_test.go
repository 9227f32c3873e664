package guard_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/keyfunc"
)

// benchRequests are the requests of BenchmarkDecision: 1024 identities.
func benchRequests() []keyfunc.Static {
	reqs := make([]keyfunc.Static, 1024)
	for i := range reqs {
		reqs[i] = keyfunc.Static{Headers: map[string][]string{"X-Client": {fmt.Sprintf("client-%d", i)}}}
	}
	return reqs
}

// benchLimiter is a Limiter of one policy (a limit no request reaches) over
// store.
func benchLimiter(b *testing.B, store core.Store) *core.Limiter {
	b.Helper()
	lim, err := core.NewLimiter(store, []core.Policy{
		{Name: "api", Key: keyfunc.Header("X-Client"), Limit: core.PerSecond(1_000_000_000)},
	})
	if err != nil {
		b.Fatal(err)
	}
	return lim
}

// BenchmarkDecision compares one decision of a Limiter over the memory
// store with one over a guard whose Redis is down and whose circuit is
// open, in each failure mode: what a dead Redis costs per request once the
// breaker has tripped. The target is at most twice the memory decision.
//
//	go test ./core/guard -run XXX -bench Decision -count 10 | grep -v "^redis:" | benchstat -
//
// (go-redis logs the failed dial on lines of its own, which benchstat would
// read as configuration.)
func BenchmarkDecision(b *testing.B) {
	reqs := benchRequests()
	run := func(b *testing.B, lim *core.Limiter) {
		ctx := context.Background()
		var d core.Decision
		i := 0
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if err := lim.Decide(ctx, &reqs[i&1023], core.Call{}, &d); err != nil {
				b.Fatal(err)
			}
			i++
		}
	}

	b.Run("memory", func(b *testing.B) {
		ms, err := memorystore.New()
		if err != nil {
			b.Fatal(err)
		}
		defer ms.Close()
		run(b, benchLimiter(b, ms))
	})

	// A Redis that was started, then killed: the address refuses
	// connections, as a dead Redis does.
	srv := redistest.StartServer(b)
	srv.Kill()
	for _, m := range []struct {
		name string
		opt  guard.Option
	}{
		{"breaker_open/open", guard.WithFailOpen()},
		{"breaker_open/closed", guard.WithFailClosed(0)},
		{"breaker_open/fallback", guard.WithFallback(1)},
	} {
		// Set up before b.Run, so that go-redis's log of the failed dial
		// is not printed in the middle of the benchmark's line.
		client := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
		defer client.Close()
		rs, err := redisstore.New(client)
		if err != nil {
			b.Fatal(err)
		}
		g, err := guard.New(rs, m.opt,
			guard.WithBreaker(guard.Breaker{Failures: 1, Cooldown: time.Hour}),
			guard.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			b.Fatal(err)
		}
		defer g.Close()
		lim := benchLimiter(b, g)
		// Trip the breaker: one failed call opens it for the hour.
		var d core.Decision
		if err := lim.Decide(context.Background(), &reqs[0], core.Call{}, &d); err != nil {
			b.Fatal(err)
		}
		if g.Circuit() != guard.Open {
			b.Fatalf("circuit %s after a failure, want open", g.Circuit())
		}
		calls := g.Stats().BackendCalls
		b.Run(m.name, func(b *testing.B) {
			run(b, lim)
			if g.Stats().BackendCalls != calls {
				b.Fatal("the backend was called while the circuit was open")
			}
		})
	}
}
