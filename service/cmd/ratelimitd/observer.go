package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rules"
)

// engineObserver passes the engine's decisions and reloads on to the
// metrics and the health.
type engineObserver struct {
	m   *metrics
	h   *health
	log *slog.Logger
}

// Decided counts the decision by rule and outcome (ratelimitd_decisions_total)
// and its latency; invalid input is counted apart, by kind.
func (o *engineObserver) Decided(ctx context.Context, ev *engine.Event) {
	if ev.Err != nil && errors.Is(ev.Err, engine.ErrInvalid) {
		o.m.invalid.WithLabelValues(ev.Kind.String()).Inc()
		return
	}
	o.m.limiter.Decided(ctx, nil, ev.Decision, ev.Took, ev.Err)
}

// Reloaded records a reload: the new revision in force, or a refused rule
// set (the last good one stays; the engine logs why).
func (o *engineObserver) Reloaded(s *rules.Snapshot, err error) {
	if err != nil {
		o.m.reloads.WithLabelValues("error").Inc()
		return
	}
	o.m.reloads.WithLabelValues("ok").Inc()
	o.applied(s)
}

// applied records s as the rules in force.
func (o *engineObserver) applied(s *rules.Snapshot) {
	o.m.rulesApplied(s.Revision(), s.LoadedAt(), len(s.Rules()))
	o.h.setRules(s.Revision(), s.LoadedAt())
}

var _ engine.Observer = (*engineObserver)(nil)

// newInvalidCounter counts requests refused as invalid input, by kind.
func newInvalidCounter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "ratelimitd", Name: "invalid_requests_total",
		Help: "Requests refused as invalid input (INVALID_ARGUMENT, 400), by kind: check, peek, report, descriptors.",
	}, []string{"kind"})
}
