package otellimit_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicehq/sluice/adapters/otellimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// recorder returns a tracer provider that keeps every span, and its
// recorder.
func recorder(t testing.TB) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	t.Helper()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, sr
}

// newMemory returns a memorystore on a clock that never moves.
func newMemory(t testing.TB) *memorystore.Store {
	t.Helper()
	clk := limitertest.NewClock()
	s, err := memorystore.New(memorystore.WithClock(clk.Now))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func policy(name string, lim core.Limit) core.Policy {
	return core.Policy{Name: name, Key: keyfunc.Const("client"), Limit: lim}
}

func newLimiter(t testing.TB, store core.Store, o core.Observer, policies ...core.Policy) *core.Limiter {
	t.Helper()
	l, err := core.NewLimiter(store, policies, core.WithObserver(o))
	require.NoError(t, err)
	return l
}

// attrs returns the attributes as a map of their values.
func attrs(kvs []attribute.KeyValue) map[string]any {
	m := map[string]any{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}

// TestSpanPerDecision: one span per decision, a child of the span in the
// context, with the binding policy's attributes: allowed, warning, denied.
func TestSpanPerDecision(t *testing.T) {
	tp, sr := recorder(t)
	l := newLimiter(t, newMemory(t), otellimit.New(otellimit.WithTracerProvider(tp)), policy("api", core.PerMinute(2)))
	ctx, parent := tp.Tracer("test").Start(context.Background(), "GET /hello")
	for range 3 {
		_, err := l.Check(ctx, keyfunc.Static{PathName: "/hello"})
		require.NoError(t, err)
	}
	parent.End()

	spans := sr.Ended()
	require.Len(t, spans, 4)
	want := []map[string]any{
		{"sluice.allowed": true, "sluice.policies": int64(1), "sluice.policy": "api", "sluice.outcome": "allowed",
			"sluice.remaining": int64(1), "sluice.limit": int64(2), "sluice.retry_after_ms": int64(0),
			"sluice.state": "normal", "sluice.source": "store"},
		{"sluice.allowed": true, "sluice.policies": int64(1), "sluice.policy": "api", "sluice.outcome": "warning",
			"sluice.remaining": int64(0), "sluice.limit": int64(2), "sluice.retry_after_ms": int64(0),
			"sluice.state": "warning", "sluice.source": "store"},
		{"sluice.allowed": false, "sluice.policies": int64(1), "sluice.policy": "api", "sluice.outcome": "denied",
			"sluice.remaining": int64(0), "sluice.limit": int64(2), "sluice.retry_after_ms": int64(30_000),
			"sluice.state": "throttled", "sluice.source": "store"},
	}
	for i, s := range spans[:3] {
		require.Equal(t, otellimit.DefaultSpanName, s.Name())
		require.Equal(t, parent.SpanContext().TraceID(), s.SpanContext().TraceID())
		require.Equal(t, parent.SpanContext().SpanID(), s.Parent().SpanID(), "a child of the request's span")
		require.Equal(t, want[i], attrs(s.Attributes()), "decision %d", i)
		require.Empty(t, s.Events(), "one policy: no per-policy events")
		require.Equal(t, codes.Unset, s.Status().Code, "a denial is not an error")
		require.False(t, s.EndTime().Before(s.StartTime()))
		require.Equal(t, otellimit.ScopeName, s.InstrumentationScope().Name)
	}
	require.Equal(t, "GET /hello", spans[3].Name())
}

// TestSpanTimes: the span covers the decision, from took before the
// observer ran to then.
func TestSpanTimes(t *testing.T) {
	tp, sr := recorder(t)
	o := otellimit.New(otellimit.WithTracerProvider(tp), otellimit.WithSpanName("ratelimit"))
	before := time.Now()
	o.Decided(context.Background(), keyfunc.Static{}, &core.Decision{Allowed: true}, 250*time.Millisecond, nil)
	after := time.Now()

	spans := sr.Ended()
	require.Len(t, spans, 1)
	s := spans[0]
	require.Equal(t, "ratelimit", s.Name())
	require.Equal(t, 250*time.Millisecond, s.EndTime().Sub(s.StartTime()))
	require.False(t, s.EndTime().Before(before))
	require.False(t, s.EndTime().After(after))
	require.False(t, s.Parent().IsValid(), "no span in the context: a root span")
	require.Equal(t, map[string]any{"sluice.allowed": true, "sluice.policies": int64(0)}, attrs(s.Attributes()),
		"no policy applied: no policy attributes")
}

// TestSeveralPolicies: the span carries the binding policy; each policy has
// an event, in the limiter's order.
func TestSeveralPolicies(t *testing.T) {
	tp, sr := recorder(t)
	trial := policy("trial", core.PerMinute(1))
	trial.Shadow = true
	l := newLimiter(t, newMemory(t), otellimit.New(otellimit.WithTracerProvider(tp)),
		policy("per-minute", core.PerMinute(3)), policy("per-hour", core.PerHour(2)), trial)
	for range 3 {
		_, err := l.Check(context.Background(), keyfunc.Static{})
		require.NoError(t, err)
	}
	spans := sr.Ended()
	require.Len(t, spans, 3)

	last := spans[2]
	got := attrs(last.Attributes())
	require.Equal(t, false, got["sluice.allowed"])
	require.Equal(t, int64(3), got["sluice.policies"])
	require.Equal(t, "per-hour", got["sluice.policy"], "the policy that denied binds")
	require.Equal(t, "denied", got["sluice.outcome"])
	require.Equal(t, int64(1_800_000), got["sluice.retry_after_ms"], "2 per hour: one every 30 minutes")

	events := last.Events()
	require.Len(t, events, 3)
	var names, outcomes []any
	for _, e := range events {
		require.Equal(t, otellimit.EventName, e.Name)
		a := attrs(e.Attributes)
		names = append(names, a["sluice.policy"])
		outcomes = append(outcomes, a["sluice.outcome"])
		require.Len(t, a, 7, "policy, outcome, remaining, limit, retry_after_ms, state, source")
	}
	require.Equal(t, []any{"per-minute", "per-hour", "trial"}, names)
	// The memorystore decides all or nothing: per-hour's denial consumed
	// nothing from per-minute, whose third request would have put it in
	// the Warning state; the shadow policy was spent by the first.
	require.Equal(t, []any{"allowed", "denied", "shadow_denied"}, outcomes)
}

// TestErrorStatus: a check that fails records the error and an Error
// status, and no policy attributes.
func TestErrorStatus(t *testing.T) {
	tp, sr := recorder(t)
	l := newLimiter(t, newMemory(t), otellimit.New(otellimit.WithTracerProvider(tp)),
		core.Policy{Name: "api", Key: keyfunc.Header("X-Api-Key"), Limit: core.PerMinute(2)})
	_, err := l.Check(context.Background(), keyfunc.Static{})
	require.ErrorIs(t, err, core.ErrNoKey)

	spans := sr.Ended()
	require.Len(t, spans, 1)
	s := spans[0]
	require.Equal(t, codes.Error, s.Status().Code)
	require.Equal(t, err.Error(), s.Status().Description)
	require.Empty(t, s.Attributes())
	require.Len(t, s.Events(), 1)
	require.Equal(t, "exception", s.Events()[0].Name)
	require.Equal(t, err.Error(), attrs(s.Events()[0].Attributes)["exception.message"])
}

// TestDegradedAndSpecialResults: a guard failing open, failing closed, a
// request that can never pass, a caller's tier.
func TestDegradedAndSpecialResults(t *testing.T) {
	closedBackend := func(t *testing.T) core.Store {
		s := newMemory(t)
		require.NoError(t, s.Close())
		return s
	}
	quiet := guard.WithLogger(slog.New(slog.DiscardHandler))
	tests := []struct {
		name  string
		store func(t *testing.T) core.Store
		opts  []core.LimiterOption
		p     core.Policy
		call  core.Call
		want  map[string]any
	}{
		{
			name: "failed open",
			store: func(t *testing.T) core.Store {
				gs, err := guard.New(closedBackend(t), quiet)
				require.NoError(t, err)
				return gs
			},
			p: policy("api", core.PerMinute(5)),
			want: map[string]any{"sluice.allowed": true, "sluice.outcome": "failed_open", "sluice.source": "failed_open",
				"sluice.limit": int64(5), "sluice.remaining": int64(0), "sluice.retry_after_ms": int64(0), "sluice.state": "normal"},
		},
		{
			name: "failed closed",
			store: func(t *testing.T) core.Store {
				gs, err := guard.New(closedBackend(t), quiet, guard.WithFailClosed(1500*time.Microsecond))
				require.NoError(t, err)
				return gs
			},
			p: policy("api", core.PerMinute(5)),
			want: map[string]any{"sluice.allowed": false, "sluice.outcome": "failed_closed", "sluice.source": "failed_closed",
				"sluice.limit": int64(5), "sluice.remaining": int64(0), "sluice.retry_after_ms": int64(2), "sluice.state": "throttled"},
		},
		{
			name:  "cost above the capacity",
			store: func(t *testing.T) core.Store { return newMemory(t) },
			p:     policy("api", core.PerMinute(5)),
			call:  core.Call{Cost: 6},
			want: map[string]any{"sluice.allowed": false, "sluice.outcome": "denied", "sluice.source": "store",
				"sluice.limit": int64(5), "sluice.remaining": int64(5), "sluice.retry_after_ms": int64(-1), "sluice.state": "throttled"},
		},
		{
			name:  "tier",
			store: func(t *testing.T) core.Store { return newMemory(t) },
			opts: []core.LimiterOption{core.WithTiering(core.Tiering{
				Key:     keyfunc.Const("customer-1"),
				Resolve: func(context.Context, string) (string, error) { return "gold", nil },
			})},
			p: func() core.Policy {
				p := policy("api", core.PerMinute(5))
				p.Tiers = map[string]core.Limit{"gold": core.PerMinute(50)}
				return p
			}(),
			want: map[string]any{"sluice.allowed": true, "sluice.outcome": "allowed", "sluice.source": "store", "sluice.tier": "gold",
				"sluice.limit": int64(50), "sluice.remaining": int64(49), "sluice.retry_after_ms": int64(0), "sluice.state": "normal"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp, sr := recorder(t)
			opts := append([]core.LimiterOption{core.WithObserver(otellimit.New(otellimit.WithTracerProvider(tp)))}, tt.opts...)
			l, err := core.NewLimiter(tt.store(t), []core.Policy{tt.p}, opts...)
			require.NoError(t, err)
			_, err = l.CheckWith(context.Background(), keyfunc.Static{}, tt.call)
			require.NoError(t, err)
			spans := sr.Ended()
			require.Len(t, spans, 1)
			want := map[string]any{"sluice.policies": int64(1), "sluice.policy": "api"}
			for k, v := range tt.want {
				want[k] = v
			}
			require.Equal(t, want, attrs(spans[0].Attributes()))
		})
	}
}

// TestRepeat: an idempotent repeat is marked.
func TestRepeat(t *testing.T) {
	tp, sr := recorder(t)
	l, err := core.NewLimiter(newMemory(t), []core.Policy{policy("api", core.PerMinute(5))},
		core.WithObserver(otellimit.New(otellimit.WithTracerProvider(tp))), core.WithIdempotency(core.Idempotency{}))
	require.NoError(t, err)
	r := keyfunc.Static{Headers: map[string][]string{"X-Idempotency-Key": {"order-1"}}}
	for range 2 {
		_, err := l.Check(context.Background(), r)
		require.NoError(t, err)
	}
	spans := sr.Ended()
	require.Len(t, spans, 2)
	require.NotContains(t, attrs(spans[0].Attributes()), "sluice.repeat")
	second := attrs(spans[1].Attributes())
	require.Equal(t, true, second["sluice.repeat"])
	require.Equal(t, "repeat", second["sluice.outcome"])
}

// TestUnsampled: a span the sampler drops is not recorded, and the
// decision goes on.
func TestUnsampled(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr), sdktrace.WithSampler(sdktrace.NeverSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	l := newLimiter(t, newMemory(t), otellimit.New(otellimit.WithTracerProvider(tp)), policy("api", core.PerMinute(5)))
	d, err := l.Check(context.Background(), keyfunc.Static{})
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Empty(t, sr.Ended())
}

// TestGlobalProvider: without WithTracerProvider, spans go to the global
// provider, even one set after New.
func TestGlobalProvider(t *testing.T) {
	previous := otel.GetTracerProvider()
	t.Cleanup(func() { otel.SetTracerProvider(previous) })
	o := otellimit.New()
	tp, sr := recorder(t)
	otel.SetTracerProvider(tp)
	o.Decided(context.Background(), keyfunc.Static{}, &core.Decision{Allowed: true}, time.Millisecond, nil)
	require.Len(t, sr.Ended(), 1)
}
