package traffic_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/internal/traffic"
)

// benchEvent is a check allowed under two rules, one of them warning.
func benchEvent() *engine.Event {
	return &engine.Event{Kind: engine.KindCheck, Dimension: "user", Identifier: "ann", Decision: &core.Decision{Allowed: true, Results: []core.PolicyResult{
		{Policy: "orders-per-user", Result: core.Result{Allowed: true, State: core.Normal}},
		{Policy: "api-per-user", Result: core.Result{Allowed: true, State: core.Warning}},
	}}}
}

// BenchmarkDecided is what counting costs a decision of two rules: two
// rule counters and the instance's, on every core at once.
func BenchmarkDecided(b *testing.B) {
	rec := traffic.NewRecorder()
	ev := benchEvent()
	rec.Decided(context.Background(), ev)
	b.ReportAllocs()
	cpu := cpuTime(b)
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			rec.Decided(ctx, ev)
		}
	})
	cpu()
}

// BenchmarkDecidedOneCore is BenchmarkDecided on one goroutine: no
// contention on the counters.
func BenchmarkDecidedOneCore(b *testing.B) {
	rec := traffic.NewRecorder()
	ev := benchEvent()
	ctx := context.Background()
	rec.Decided(ctx, ev)
	b.ReportAllocs()
	cpu := cpuTime(b)
	for b.Loop() {
		rec.Decided(ctx, ev)
	}
	cpu()
}

// cpuTime starts measuring the process's CPU time (user and system); the
// function it returns reports it per op as cpu-ns/op. On a machine shared
// with other work, ns/op is wall time, stretched by waiting for a core;
// cpu-ns/op is what the counting itself costs.
func cpuTime(b *testing.B) func() {
	used := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := used()
	return func() { b.ReportMetric(float64(used()-start)/float64(b.N), "cpu-ns/op") }
}
