package otellimit_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sluicehq/sluice/adapters/otellimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// BenchmarkDecided measures the Observer alone on a decision of one and of
// two policies: with a span recorded (the SDK, nothing exported), dropped
// by the sampler, and with the no-op provider.
func BenchmarkDecided(b *testing.B) {
	providers := []struct {
		name string
		tp   trace.TracerProvider
	}{
		{"recorded", sdktrace.NewTracerProvider()},
		{"unsampled", sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))},
		{"noop", noop.NewTracerProvider()},
	}
	for _, policies := range [][]core.Policy{
		{policy("api", core.PerHour(1_000_000))},
		{policy("api", core.PerHour(1_000_000)), policy("burst", core.PerHour(1_000_000))},
	} {
		l, err := core.NewLimiter(newMemory(b), policies)
		if err != nil {
			b.Fatal(err)
		}
		var d core.Decision
		ctx := context.Background()
		if err := l.Decide(ctx, keyfunc.Static{}, core.Call{}, &d); err != nil {
			b.Fatal(err)
		}
		for _, p := range providers {
			o := otellimit.New(otellimit.WithTracerProvider(p.tp))
			b.Run(p.name+"/policies="+string(rune('0'+len(policies))), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					o.Decided(ctx, keyfunc.Static{}, &d, 3*time.Microsecond, nil)
				}
			})
		}
	}
}
