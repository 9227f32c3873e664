package otellimit

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// ScopeName is the instrumentation scope of the tracer.
const ScopeName = "github.com/sluicehq/sluice/adapters/otellimit"

// DefaultSpanName is the name of a decision's span.
const DefaultSpanName = "sluice.decide"

// EventName is the name of the per-policy events of a span.
const EventName = "sluice.policy"

// The attribute keys.
const (
	KeyAllowed    = attribute.Key("sluice.allowed")
	KeyPolicies   = attribute.Key("sluice.policies")
	KeyPolicy     = attribute.Key("sluice.policy")
	KeyOutcome    = attribute.Key("sluice.outcome")
	KeyRemaining  = attribute.Key("sluice.remaining")
	KeyLimit      = attribute.Key("sluice.limit")
	KeyRetryAfter = attribute.Key("sluice.retry_after_ms")
	KeyState      = attribute.Key("sluice.state")
	KeySource     = attribute.Key("sluice.source")
	KeyTier       = attribute.Key("sluice.tier")
	KeyRepeat     = attribute.Key("sluice.repeat")
)

type config struct {
	provider trace.TracerProvider
	name     string
}

// Option configures an Observer.
type Option func(*config)

// WithTracerProvider sets where spans go (otel.GetTracerProvider() by
// default, which follows a provider set later with otel.SetTracerProvider).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.provider = tp }
}

// WithSpanName sets the name of a decision's span (DefaultSpanName).
func WithSpanName(name string) Option { return func(c *config) { c.name = name } }

// Observer records a span per decision. It implements core.Observer; give
// it to a limiter with core.WithObserver. It is safe for concurrent use.
type Observer struct {
	tracer trace.Tracer
	name   string
}

// New returns an Observer.
func New(opts ...Option) *Observer {
	c := config{name: DefaultSpanName}
	for _, o := range opts {
		o(&c)
	}
	if c.provider == nil {
		c.provider = otel.GetTracerProvider()
	}
	if c.name == "" {
		c.name = DefaultSpanName
	}
	return &Observer{tracer: c.provider.Tracer(ScopeName), name: c.name}
}

// Decided implements core.Observer: it records a span from took ago to
// now, a child of the span in ctx.
func (o *Observer) Decided(ctx context.Context, _ keyfunc.Request, d *core.Decision, took time.Duration, err error) {
	end := time.Now()
	_, span := o.tracer.Start(ctx, o.name, trace.WithTimestamp(end.Add(-took)))
	if span.IsRecording() {
		if err != nil {
			span.RecordError(err, trace.WithTimestamp(end))
			span.SetStatus(codes.Error, err.Error())
		} else if d != nil {
			annotate(span, d, end)
		}
	}
	span.End(trace.WithTimestamp(end))
}

// annotate sets the attributes of a decision on span.
func annotate(span trace.Span, d *core.Decision, at time.Time) {
	var buf [12]attribute.KeyValue
	attrs := append(buf[:0], KeyAllowed.Bool(d.Allowed), KeyPolicies.Int(len(d.Results)))
	if d.Repeat {
		attrs = append(attrs, KeyRepeat.Bool(true))
	}
	if d.Binding < len(d.Results) {
		attrs = policyAttributes(attrs, d, d.Binding)
	}
	span.SetAttributes(attrs...)
	if len(d.Results) < 2 {
		return
	}
	for i := range d.Results {
		span.AddEvent(EventName, trace.WithTimestamp(at),
			trace.WithAttributes(policyAttributes(make([]attribute.KeyValue, 0, 8), d, i)...))
	}
}

// policyAttributes appends the attributes of d.Results[i].
func policyAttributes(attrs []attribute.KeyValue, d *core.Decision, i int) []attribute.KeyValue {
	p := &d.Results[i]
	attrs = append(attrs,
		KeyPolicy.String(p.Policy),
		KeyOutcome.String(d.Outcome(i).String()),
		KeyRemaining.Int64(p.Remaining),
		KeyLimit.Int64(p.Capacity),
		KeyRetryAfter.Int64(retryMillis(p.RetryAfter)),
		KeyState.String(p.State.String()),
		KeySource.String(p.Source.String()),
	)
	if p.Tier != "" {
		attrs = append(attrs, KeyTier.String(p.Tier))
	}
	return attrs
}

// retryMillis rounds d up to the millisecond (a wait shown as 0 would be
// a lie), with -1 for core.RetryNever.
func retryMillis(d time.Duration) int64 {
	if d == core.RetryNever {
		return -1
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

var _ core.Observer = (*Observer)(nil)
