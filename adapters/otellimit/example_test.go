package otellimit_test

import (
	"context"
	"fmt"
	"log"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicehq/sluice/adapters/otellimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// Every decision becomes a span under the request's span. Here the spans
// are kept in memory to be printed; a service gives its own provider (or
// sets the global one, the default).
func Example() {
	spans := tracetest.NewSpanRecorder()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer provider.Shutdown(context.Background())

	store, err := memorystore.New()
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	limiter, err := core.NewLimiter(store,
		[]core.Policy{{Name: "per-client", Key: keyfunc.Header("X-Api-Key"), Limit: core.PerMinute(1)}},
		core.WithObserver(otellimit.New(otellimit.WithTracerProvider(provider))))
	if err != nil {
		log.Fatal(err)
	}

	// What otelhttp or otelgrpc does for every request: a server span in
	// the request's context.
	ctx, request := provider.Tracer("server").Start(context.Background(), "GET /orders")
	r := keyfunc.Static{Ctx: ctx, PathName: "/orders", Headers: map[string][]string{"X-Api-Key": {"k-1"}}}
	for range 2 {
		if _, err := limiter.Check(ctx, r); err != nil {
			log.Fatal(err)
		}
	}
	request.End()

	for _, s := range spans.Ended() {
		if s.Name() != otellimit.DefaultSpanName {
			continue
		}
		a := map[string]any{}
		for _, kv := range s.Attributes() {
			a[string(kv.Key)] = kv.Value.AsInterface()
		}
		fmt.Println(s.Name(), "child of", s.Parent().SpanID() == request.SpanContext().SpanID(),
			a["sluice.policy"], a["sluice.outcome"], a["sluice.remaining"], a["sluice.state"])
	}
	// Output:
	// sluice.decide child of true per-client warning 0 warning
	// sluice.decide child of true per-client denied 0 throttled
}
