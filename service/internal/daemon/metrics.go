package daemon

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/adapters/promlimit"
	"github.com/sluicehq/sluice/service/adminauth"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// metrics are ratelimitd's Prometheus metrics, on a registry of its own
// (no global state), served at /metrics. No label ever holds an identity,
// a key or a descriptor value: rule names, outcomes, APIs, methods and
// status codes only, all from bounded sets.
type metrics struct {
	reg *prometheus.Registry
	// limiter counts decisions by rule and outcome and their latency (a
	// core.Observer given to the engine) and the guard's store errors and
	// circuit (a guard.Observer): ratelimitd_decisions_total{policy,outcome},
	// ratelimitd_decision_duration_seconds, ratelimitd_store_errors_total{kind},
	// ratelimitd_circuit_state, ...
	limiter *promlimit.Collector

	requests    *prometheus.HistogramVec // {api, method, code}
	reloads     *prometheus.CounterVec   // {result}
	reloadOK    prometheus.Gauge
	overrides   *prometheus.CounterVec // {result}
	rulesInfo   *prometheus.GaugeVec   // {revision} 1
	rulesLoaded prometheus.Gauge
	rulesCount  prometheus.Gauge
	up          *prometheus.GaugeVec   // {component}
	invalid     *prometheus.CounterVec // {kind}
	authFailed  *prometheus.CounterVec // {reason}

	mu       sync.Mutex
	revision string
}

func newMetrics() (*metrics, error) {
	lim, err := promlimit.New(promlimit.WithNamespace("ratelimitd"))
	if err != nil {
		return nil, err
	}
	m := &metrics{
		reg:     prometheus.NewRegistry(),
		limiter: lim,
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "ratelimitd", Name: "request_duration_seconds",
			Help:    "Time to answer a request, by API (grpc, http), method or route, and status code.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"api", "method", "code"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ratelimitd", Name: "rules_reloads_total",
			Help: "Rules loads after the first, by result: ok (a new snapshot is in force) or error (rejected, the last good rules stay).",
		}, []string{"result"}),
		reloadOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "ratelimitd", Name: "rules_last_reload_successful",
			Help: "1 while the rules source's latest state is in force; 0 from a refused load (invalid rules, an unreadable file, an unreachable rules database) until rules load again.",
		}),
		overrides: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ratelimitd", Name: "overrides_applied_total",
			Help: "Overrides of the rules applied to the store as snapshots were put in force, by result: set, cleared, or error (logged; retried with the next rules).",
		}, []string{"result"}),
		rulesInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "ratelimitd", Name: "rules_info",
			Help: "1 for the revision of the rules in force (one series).",
		}, []string{"revision"}),
		rulesLoaded: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "ratelimitd", Name: "rules_loaded_timestamp_seconds",
			Help: "When the rules in force were loaded (Unix time).",
		}),
		rulesCount: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "ratelimitd", Name: "rules",
			Help: "Number of rules in force.",
		}),
		authFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ratelimitd", Name: "admin_auth_failures_total",
			Help: "Failed authentications of the admin plane (admin API, admin page login, gRPC admin calls), by reason: invalid (an unknown, revoked or malformed token) or throttled (refused unread: the client failed too often).",
		}, []string{"reason"}),
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "ratelimitd", Name: "component_up",
			Help: "1 when the component is healthy: store (reachable), rules (loaded), serving (not draining).",
		}, []string{"component"}),
	}
	m.invalid = newInvalidCounter()
	m.exposeLabels()
	for _, c := range []prometheus.Collector{
		lim, m.requests, m.reloads, m.reloadOK, m.overrides, m.invalid, m.authFailed, m.rulesInfo, m.rulesLoaded, m.rulesCount, m.up,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := m.reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// exposeLabels creates the series of every label of the bounded sets, so
// that each is exposed (at 0) before its first event.
func (m *metrics) exposeLabels() {
	for _, k := range invalidKinds {
		m.invalid.WithLabelValues(k)
	}
	for _, r := range []string{"ok", "error"} {
		m.reloads.WithLabelValues(r)
	}
	for _, r := range []string{"set", "cleared", "error"} {
		m.overrides.WithLabelValues(r)
	}
	for _, c := range []string{"store", "rules", "serving"} {
		m.up.WithLabelValues(c)
	}
	for _, r := range []string{adminauth.FailureInvalid, adminauth.FailureThrottled} {
		m.authFailed.WithLabelValues(r)
	}
}

// authFailure counts a failed authentication of the admin plane
// (adminauth.Options.OnFailure).
func (m *metrics) authFailure(reason string) { m.authFailed.WithLabelValues(reason).Inc() }

// handler serves the registry.
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// rulesApplied records the snapshot now in force.
func (m *metrics) rulesApplied(revision string, loadedAt time.Time, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if revision != m.revision {
		m.rulesInfo.Reset()
		m.rulesInfo.WithLabelValues(revision).Set(1)
		m.revision = revision
	}
	m.rulesLoaded.Set(float64(loadedAt.UnixNano()) / 1e9)
	m.rulesCount.Set(float64(n))
	m.reloadOK.Set(1)
}

// watchListener registers the rules listener's metrics, read from state at
// each scrape: ratelimitd_rules_listener_up (1 while it is LISTENing and
// answers its probes) and ratelimitd_rules_listener_reconnects_total.
func (m *metrics) watchListener(state func() rulesdb.ListenerState) error {
	up := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "ratelimitd", Name: "rules_listener_up",
		Help: "1 while the rules database's listener (PostgreSQL LISTEN) is connected and answers its probes; 0 while changes arrive by the poll only.",
	}, func() float64 {
		if state().Up {
			return 1
		}
		return 0
	})
	reconnects := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: "ratelimitd", Name: "rules_listener_reconnects_total",
		Help: "Times the rules database's listener was re-established after its connection was lost or failed a probe (each followed by a full reload).",
	}, func() float64 { return float64(state().Reconnects) })
	for _, c := range []prometheus.Collector{up, reconnects} {
		if err := m.reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// setUp records a component's health.
func (m *metrics) setUp(component string, ok bool) {
	v := 0.0
	if ok {
		v = 1
	}
	m.up.WithLabelValues(component).Set(v)
}

// unaryInterceptor times every unary gRPC call by method and code. Only
// registered methods reach an interceptor, so the method label is bounded.
func (m *metrics) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := h(ctx, req)
	code := status.Code(err)
	m.requests.WithLabelValues("grpc", info.FullMethod, code.String()).Observe(time.Since(start).Seconds())
	if code == codes.InvalidArgument {
		m.invalidInput("grpc", info.FullMethod)
	}
	return resp, err
}

// instrument times an HTTP handler under its route pattern.
func (m *metrics) instrument(route string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(sw, r)
		m.requests.WithLabelValues("http", route, strconv.Itoa(sw.code)).Observe(time.Since(start).Seconds())
		switch sw.code {
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType:
			m.invalidInput("http", route)
		}
	})
}

// invalidInput counts a request refused as invalid input, by the kind of
// its method or route (ratelimitd_invalid_requests_total).
func (m *metrics) invalidInput(api, method string) {
	if k := invalidKind(api, method); k != "" {
		m.invalid.WithLabelValues(k).Inc()
	}
}

// statusWriter remembers the status code written.
type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.code, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the writer's own methods.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
