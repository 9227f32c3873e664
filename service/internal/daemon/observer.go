package daemon

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/httpapi"
	"github.com/sluicehq/sluice/service/ratelimitv1"
	"github.com/sluicehq/sluice/service/rules"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// engineObserver passes the engine's decisions and reloads on to the
// metrics and the health.
type engineObserver struct {
	m   *metrics
	h   *health
	log *slog.Logger
	// cachedAt, when set, tells when the cache the rules in force came
	// from was written (ok false: they came from the source itself).
	cachedAt func() (time.Time, bool)
}

// Decided counts the decision by rule and outcome (ratelimitd_decisions_total)
// and its latency. Invalid input is no decision: the front doors count it
// (ratelimitd_invalid_requests_total), whether they or the engine found it.
func (o *engineObserver) Decided(ctx context.Context, ev *engine.Event) {
	if errors.Is(ev.Err, engine.ErrInvalid) {
		return
	}
	o.m.limiter.Decided(ctx, nil, ev.Decision, ev.Took, ev.Err)
}

// Reloaded records a reload: the new revision in force, or a refused rule
// set (the last good one stays; the engine logs why) or an unreadable
// source, which ratelimitd_rules_last_reload_successful shows until rules
// load again.
func (o *engineObserver) Reloaded(s *rules.Snapshot, err error) {
	if err != nil {
		o.m.reloads.WithLabelValues("error").Inc()
		o.m.reloadOK.Set(0)
		return
	}
	o.m.reloads.WithLabelValues("ok").Inc()
	o.applied(s)
}

// OverridesApplied counts the overrides of a snapshot set on the store,
// cleared, and failed (ratelimitd_overrides_applied_total; the engine logs
// the failures).
func (o *engineObserver) OverridesApplied(_ *rules.Snapshot, set, cleared int, err error) {
	o.m.overrides.WithLabelValues("set").Add(float64(set))
	o.m.overrides.WithLabelValues("cleared").Add(float64(cleared))
	if err != nil {
		n := 1
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			n = len(j.Unwrap())
		}
		o.m.overrides.WithLabelValues("error").Add(float64(n))
	}
}

// applied records s as the rules in force.
func (o *engineObserver) applied(s *rules.Snapshot) {
	at := s.LoadedAt()
	if o.cachedAt != nil && strings.HasSuffix(s.Revision(), rulesdb.CachedSuffix) {
		// Rules from --rules-cache are as old as the cache.
		if c, ok := o.cachedAt(); ok {
			at = c
		}
	}
	o.m.rulesApplied(s.Revision(), at, len(s.Rules()))
	o.h.setRules(s.Revision(), at)
}

var _ engine.OverridesObserver = (*engineObserver)(nil)

// newInvalidCounter counts requests refused as invalid input, by kind.
func newInvalidCounter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "ratelimitd", Name: "invalid_requests_total",
		Help: "Requests refused as invalid input (gRPC INVALID_ARGUMENT; HTTP 400, 413 or 415), by kind: check, batch, peek, reset, report, descriptors, store.",
	}, []string{"kind"})
}

// invalidKinds are the kinds of ratelimitd_invalid_requests_total.
var invalidKinds = []string{"check", "batch", "peek", "reset", "report", "descriptors", "store"}

// invalidKind is the kind of a gRPC method or an HTTP route, for
// ratelimitd_invalid_requests_total; "" for one that takes no input
// (health, reflection, metrics).
func invalidKind(api, method string) string {
	switch method {
	case ratelimitv1.RateLimitService_CheckRateLimit_FullMethodName, httpapi.Path:
		return "check"
	case ratelimitv1.RateLimitService_CheckRateLimitBatch_FullMethodName:
		return "batch"
	case ratelimitv1.RateLimitService_GetRemainingQuota_FullMethodName:
		return "peek"
	case ratelimitv1.RateLimitService_ResetLimit_FullMethodName:
		return "reset"
	case ratelimitv1.RateLimitService_Report_FullMethodName:
		return "report"
	case ratelimitv3.RateLimitService_ShouldRateLimit_FullMethodName, "/json":
		return "descriptors"
	}
	if api == "grpc" && strings.HasPrefix(method, "/"+ratelimitv1.StoreService_ServiceDesc.ServiceName+"/") {
		return "store"
	}
	return ""
}
