package promlimit

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/keyfunc"
)

// defaultBuckets are the bounds, in seconds, of the decision latency
// histogram: from 10 µs (an in-memory decision) through a loopback and a
// remote Redis round trip to 100 ms.
var defaultBuckets = [...]float64{
	0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005,
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
}

// The reasons of sluice_check_errors_total.
const (
	reasonNoKey = iota
	reasonInvalid
	reasonContext
	reasonStore
	numReasons
)

var reasonNames = [numReasons]string{
	reasonNoKey:   "no_key",
	reasonInvalid: "invalid",
	reasonContext: "context",
	reasonStore:   "store",
}

func reasonOf(err error) int {
	switch {
	case errors.Is(err, core.ErrNoKey):
		return reasonNoKey
	case errors.Is(err, core.ErrInvalidCost), errors.Is(err, core.ErrInvalidLimit):
		return reasonInvalid
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return reasonContext
	}
	return reasonStore
}

var errorKinds = [...]guard.ErrorKind{guard.KindTimeout, guard.KindConnection, guard.KindClosed, guard.KindBackend}

var circuits = [...]guard.Circuit{guard.Closed, guard.Open, guard.HalfOpen}

type config struct {
	namespace, subsystem string
	buckets              []float64
	constLabels          prometheus.Labels
}

// Option configures a Collector.
type Option func(*config)

// WithNamespace sets the first part of every metric name ("sluice" by
// default; "" for none). Names are [a-zA-Z_][a-zA-Z0-9_]*.
func WithNamespace(ns string) Option { return func(c *config) { c.namespace = ns } }

// WithSubsystem sets a part between the namespace and the name
// (sluice_<subsystem>_decisions_total); none by default.
func WithSubsystem(s string) Option { return func(c *config) { c.subsystem = s } }

// WithBuckets sets the bounds, in seconds and increasing, of the decision
// latency histogram. The default runs from 10 µs (an in-memory decision)
// through a loopback and a remote Redis round trip to 100 ms: 10 µs, 25 µs,
// 50 µs, 100 µs, 250 µs, 500 µs, 1 ms, 2.5 ms, 5 ms, 10 ms, 25 ms, 50 ms,
// 100 ms.
func WithBuckets(b ...float64) Option {
	return func(c *config) { c.buckets = append([]float64(nil), b...) }
}

// WithConstLabels adds labels with fixed values to every metric: to tell
// apart the Collectors of several limiters or guarded stores in one
// process, say. Their names are [a-zA-Z_][a-zA-Z0-9_]*, and not policy,
// outcome, reason, kind or to.
func WithConstLabels(l prometheus.Labels) Option {
	return func(c *config) { c.constLabels = maps.Clone(l) }
}

// Collector turns decisions and guard events into Prometheus metrics. It
// implements prometheus.Collector, core.Observer and guard.Observer, and is
// safe for concurrent use. Build one with New.
type Collector struct {
	decisions    *prometheus.CounterVec
	denyHits     *prometheus.CounterVec
	duration     prometheus.Histogram
	checkErrors  *prometheus.CounterVec
	storeErrors  *prometheus.CounterVec
	circuit      prometheus.Gauge
	transitions  *prometheus.CounterVec
	errorsBy     [numReasons]prometheus.Counter
	storeErrorBy [len(errorKinds)]prometheus.Counter
	enteredBy    [len(circuits)]prometheus.Counter

	// policies maps a policy name to its resolved series. It is replaced,
	// never modified, so Decided reads it without a lock; mu serialises the
	// writers.
	policies atomic.Pointer[map[string]*policySeries]
	mu       sync.Mutex
}

// policySeries are the series of one policy, resolved once.
type policySeries struct {
	outcomes [core.NumOutcomes]prometheus.Counter
	denyHits prometheus.Counter
}

// New returns a Collector. It fails if an option makes an invalid metric
// name, label or bucket list.
func New(opts ...Option) (*Collector, error) {
	c := config{namespace: "sluice", buckets: slices.Clone(defaultBuckets[:])}
	for _, o := range opts {
		o(&c)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	m := c.metrics()
	// Invalid names and labels panic in the Vecs' WithLabelValues below, but
	// are only reported by a registry: register everything on a scratch one
	// first so that New fails instead.
	if err := prometheus.NewPedanticRegistry().Register(m); err != nil {
		return nil, fmt.Errorf("promlimit: New: %w", err)
	}
	for i := range m.errorsBy {
		m.errorsBy[i] = m.checkErrors.WithLabelValues(reasonNames[i])
	}
	for i, k := range errorKinds {
		m.storeErrorBy[i] = m.storeErrors.WithLabelValues(k.String())
	}
	for i, s := range circuits {
		m.enteredBy[i] = m.transitions.WithLabelValues(s.String())
	}
	m.policies.Store(&map[string]*policySeries{})
	return m, nil
}

// validate checks the bucket list (not empty, increasing) and the names
// the options give.
func (c *config) validate() error {
	if len(c.buckets) == 0 {
		return errors.New("promlimit: WithBuckets: no bucket")
	}
	for i := 1; i < len(c.buckets); i++ {
		if !(c.buckets[i] > c.buckets[i-1]) {
			return fmt.Errorf("promlimit: WithBuckets: bounds must increase, got %v after %v", c.buckets[i], c.buckets[i-1])
		}
	}
	if err := legacyName("WithNamespace", c.namespace, true); err != nil {
		return err
	}
	if err := legacyName("WithSubsystem", c.subsystem, true); err != nil {
		return err
	}
	for name := range c.constLabels {
		if err := legacyName("WithConstLabels", name, false); err != nil {
			return err
		}
	}
	return nil
}

// metrics is a Collector of c's metrics, not yet registered nor resolved.
func (c *config) metrics() *Collector {
	opt := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: c.namespace, Subsystem: c.subsystem, Name: name, Help: help, ConstLabels: c.constLabels}
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts(opt(name, help)), labels)
	}
	return &Collector{
		decisions: counter("decisions_total",
			"Policy results of rate-limit decisions, by policy and outcome.", "policy", "outcome"),
		denyHits: counter("deny_cache_hits_total",
			"Policy results answered by the guard's deny cache without a backend call.", "policy"),
		checkErrors: counter("check_errors_total",
			"Rate-limit checks that returned an error to the caller, by reason.", "reason"),
		storeErrors: counter("store_errors_total",
			"Failed or timed-out backend calls of the guarded store, by kind.", "kind"),
		transitions: counter("circuit_transitions_total",
			"Transitions of the guarded store's circuit breaker, by the state entered.", "to"),
		circuit: prometheus.NewGauge(prometheus.GaugeOpts(opt("circuit_state",
			"State of the guarded store's circuit breaker: 0 closed, 1 open, 2 half-open."))),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: c.namespace, Subsystem: c.subsystem, Name: "decision_duration_seconds",
			Help:        "Time taken by rate-limit checks, errors included.",
			ConstLabels: c.constLabels, Buckets: c.buckets,
		}),
	}
}

// legacyName checks that s is a name every Prometheus version accepts and
// PromQL needs no quotes for: [a-zA-Z_][a-zA-Z0-9_]*.
func legacyName(option, s string, empty bool) error {
	if s == "" {
		if empty {
			return nil
		}
		return fmt.Errorf("promlimit: %s: empty name", option)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || i > 0 && c >= '0' && c <= '9') {
			return fmt.Errorf("promlimit: %s: %q: only [a-zA-Z_][a-zA-Z0-9_]* allowed", option, s)
		}
	}
	return nil
}

// Describe implements prometheus.Collector.
func (m *Collector) Describe(ch chan<- *prometheus.Desc) {
	m.decisions.Describe(ch)
	m.denyHits.Describe(ch)
	m.duration.Describe(ch)
	m.checkErrors.Describe(ch)
	m.storeErrors.Describe(ch)
	m.circuit.Describe(ch)
	m.transitions.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Collector) Collect(ch chan<- prometheus.Metric) {
	m.decisions.Collect(ch)
	m.denyHits.Collect(ch)
	m.duration.Collect(ch)
	m.checkErrors.Collect(ch)
	m.storeErrors.Collect(ch)
	m.circuit.Collect(ch)
	m.transitions.Collect(ch)
}

// Decided implements core.Observer: it counts each policy result of d by
// outcome, its deny-cache hits, the time taken, and err.
func (m *Collector) Decided(_ context.Context, _ keyfunc.Request, d *core.Decision, took time.Duration, err error) {
	m.duration.Observe(took.Seconds())
	if err != nil {
		m.errorsBy[reasonOf(err)].Inc()
		return
	}
	if d == nil {
		return
	}
	for i := range d.Results {
		p := &d.Results[i]
		s := m.series(p.Policy)
		s.outcomes[d.Outcome(i)].Inc()
		if p.Source == core.FromDenyCache {
			s.denyHits.Inc()
		}
	}
}

// series returns the series of policy, creating them on first use.
func (m *Collector) series(policy string) *policySeries {
	if s, ok := (*m.policies.Load())[policy]; ok {
		return s
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old := *m.policies.Load()
	if s, ok := old[policy]; ok {
		return s
	}
	s := &policySeries{denyHits: m.denyHits.WithLabelValues(policy)}
	for o := range s.outcomes {
		s.outcomes[o] = m.decisions.WithLabelValues(policy, core.Outcome(o).String())
	}
	next := make(map[string]*policySeries, len(old)+1)
	maps.Copy(next, old)
	next[policy] = s
	m.policies.Store(&next)
	return s
}

// CircuitChanged implements guard.Observer: it sets the circuit gauge and
// counts the transition.
func (m *Collector) CircuitChanged(_, to guard.Circuit) {
	m.circuit.Set(float64(to))
	if int(to) < len(m.enteredBy) {
		m.enteredBy[to].Inc()
	}
}

// BackendFailed implements guard.Observer: it counts the failure by kind.
func (m *Collector) BackendFailed(kind guard.ErrorKind, _ error) {
	if int(kind) < len(m.storeErrorBy) {
		m.storeErrorBy[kind].Inc()
		return
	}
	m.storeErrors.WithLabelValues(kind.String()).Inc()
}

var (
	_ prometheus.Collector = (*Collector)(nil)
	_ core.Observer        = (*Collector)(nil)
	_ guard.Observer       = (*Collector)(nil)
)
