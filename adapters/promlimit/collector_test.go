package promlimit_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/promlimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/keyfunc"
)

// TestOutcomes drives real limiters, over a memorystore and over a guard of
// a memorystore, and checks every sample the Collector exports.
func TestOutcomes(t *testing.T) {
	const hist = "sluice_decision_duration_seconds"
	tests := []struct {
		name string
		// run builds a limiter observed by c and sends requests through it.
		run  func(t *testing.T, c *promlimit.Collector)
		want map[string]float64
	}{
		{
			// PerMinute(5): usage 0.2 .. 0.8 is Normal, 1.0 is Warning, then
			// denials.
			name: "allowed, warning, denied",
			run: func(t *testing.T, c *promlimit.Collector) {
				l := newLimiter(t, newMemory(t), c, policy("api", core.PerMinute(5)))
				require.Equal(t, 5, check(t, l, 7))
			},
			want: map[string]float64{
				`sluice_decisions_total{outcome="allowed",policy="api"}`: 4,
				`sluice_decisions_total{outcome="warning",policy="api"}`: 1,
				`sluice_decisions_total{outcome="denied",policy="api"}`:  2,
				hist + "_count": 7, hist + "_sum": -1,
			},
		},
		{
			name: "shadow policy",
			run: func(t *testing.T, c *promlimit.Collector) {
				trial := policy("trial", core.PerMinute(2))
				trial.Shadow = true
				l := newLimiter(t, newMemory(t), c, policy("api", core.PerMinute(10)), trial)
				require.Equal(t, 3, check(t, l, 3), "a shadow policy denies nothing")
			},
			want: map[string]float64{
				`sluice_decisions_total{outcome="allowed",policy="api"}`:         3,
				`sluice_decisions_total{outcome="allowed",policy="trial"}`:       1,
				`sluice_decisions_total{outcome="warning",policy="trial"}`:       1,
				`sluice_decisions_total{outcome="shadow_denied",policy="trial"}`: 1,
				hist + "_count": 3, hist + "_sum": -1,
			},
		},
		{
			name: "idempotent repeat",
			run: func(t *testing.T, c *promlimit.Collector) {
				l := newLimiter(t, newMemory(t), c, policy("api", core.PerMinute(10)),
					core.WithIdempotency(core.Idempotency{}))
				r := keyfunc.Static{PathName: "/", Headers: map[string][]string{"X-Idempotency-Key": {"order-1"}}}
				for range 2 {
					d, err := l.Check(context.Background(), r)
					require.NoError(t, err)
					require.True(t, d.Allowed)
				}
			},
			want: map[string]float64{
				`sluice_decisions_total{outcome="allowed",policy="api"}`: 1,
				`sluice_decisions_total{outcome="repeat",policy="api"}`:  1,
				hist + "_count": 2, hist + "_sum": -1,
			},
		},
		{
			name: "errors returned to the caller",
			run: func(t *testing.T, c *promlimit.Collector) {
				ctx := context.Background()
				byHeader := core.Policy{Name: "api", Key: keyfunc.Header("X-Api-Key"), Limit: core.PerMinute(10)}
				l := newLimiter(t, newMemory(t), c, byHeader)
				_, err := l.Check(ctx, keyfunc.Static{PathName: "/"})
				require.ErrorIs(t, err, core.ErrNoKey)
				withKey := keyfunc.Static{PathName: "/", Headers: map[string][]string{"X-Api-Key": {"k1"}}}
				_, err = l.CheckWith(ctx, withKey, core.Call{Cost: -1})
				require.ErrorIs(t, err, core.ErrInvalidCost)
				_, err = l.Check(ctx, withKey)
				require.NoError(t, err)

				closed := newMemory(t)
				require.NoError(t, closed.Close())
				unguarded := newLimiter(t, closed, c, policy("other", core.PerMinute(10)))
				_, err = unguarded.Check(ctx, keyfunc.Static{})
				require.ErrorIs(t, err, core.ErrClosed)
			},
			want: map[string]float64{
				`sluice_decisions_total{outcome="allowed",policy="api"}`: 1,
				`sluice_check_errors_total{reason="no_key"}`:             1,
				`sluice_check_errors_total{reason="invalid"}`:            1,
				`sluice_check_errors_total{reason="store"}`:              1,
				hist + "_count": 4, hist + "_sum": -1,
			},
		},
		{
			// The backend is closed: 3 failures open the circuit, the
			// next 3 requests are answered without a backend call.
			name: "guard fails open",
			run: func(t *testing.T, c *promlimit.Collector) {
				l := newLimiter(t, failingGuard(t, c), c, policy("api", core.PerMinute(10)))
				require.Equal(t, 6, check(t, l, 6))
			},
			want: map[string]float64{
				`sluice_decisions_total{outcome="failed_open",policy="api"}`: 6,
				`sluice_store_errors_total{kind="closed"}`:                   3,
				`sluice_circuit_state`:                                       1,
				`sluice_circuit_transitions_total{to="open"}`:                1,
				hist + "_count": 6, hist + "_sum": -1,
			},
		},
		{
			name: "guard fails closed",
			run: func(t *testing.T, c *promlimit.Collector) {
				l := newLimiter(t, failingGuard(t, c, guard.WithFailClosed(0)), c, policy("api", core.PerMinute(10)))
				require.Equal(t, 0, check(t, l, 4))
			},
			want: map[string]float64{
				`sluice_decisions_total{outcome="failed_closed",policy="api"}`: 4,
				`sluice_store_errors_total{kind="closed"}`:                     3,
				`sluice_circuit_state`:                                         1,
				`sluice_circuit_transitions_total{to="open"}`:                  1,
				hist + "_count": 4, hist + "_sum": -1,
			},
		},
		{
			// Two policies decided together; the local fallback decides
			// both.
			name: "guard falls back",
			run: func(t *testing.T, c *promlimit.Collector) {
				l := newLimiter(t, failingGuard(t, c, guard.WithFallback(1)), c,
					policy("api", core.PerMinute(2)), policy("burst", core.PerMinute(10)))
				require.Equal(t, 2, check(t, l, 3))
			},
			want: map[string]float64{
				`sluice_decisions_total{outcome="fallback",policy="api"}`:   3,
				`sluice_decisions_total{outcome="fallback",policy="burst"}`: 3,
				`sluice_store_errors_total{kind="closed"}`:                  3,
				`sluice_circuit_state`:                                      1,
				`sluice_circuit_transitions_total{to="open"}`:               1,
				hist + "_count": 3, hist + "_sum": -1,
			},
		},
		{
			// PerMinute(2): the 3rd request is denied by the store, which
			// the guard remembers; the 4th and 5th are denied from memory.
			name: "deny cache",
			run: func(t *testing.T, c *promlimit.Collector) {
				gs, err := guard.New(newMemory(t), guard.WithObserver(c), quiet, guard.WithDenyCache(guard.DenyCache{MaxKeys: 100}))
				require.NoError(t, err)
				l := newLimiter(t, gs, c, policy("api", core.PerMinute(2)))
				require.Equal(t, 2, check(t, l, 5))
				require.Equal(t, uint64(2), gs.Stats().DenyCacheHits)
			},
			want: map[string]float64{
				`sluice_decisions_total{outcome="allowed",policy="api"}`: 1,
				`sluice_decisions_total{outcome="warning",policy="api"}`: 1,
				`sluice_decisions_total{outcome="denied",policy="api"}`:  3,
				`sluice_deny_cache_hits_total{policy="api"}`:             2,
				hist + "_count": 5, hist + "_sum": -1,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCollector(t)
			tt.run(t, c)
			require.Equal(t, tt.want, values(t, c))
		})
	}
}

// newLimiter returns a limiter over store observed by c. Arguments are
// policies or limiter options.
func newLimiter(t testing.TB, store core.Store, c *promlimit.Collector, args ...any) *core.Limiter {
	t.Helper()
	var policies []core.Policy
	opts := []core.LimiterOption{core.WithObserver(c)}
	for _, a := range args {
		switch a := a.(type) {
		case core.Policy:
			policies = append(policies, a)
		case core.LimiterOption:
			opts = append(opts, a)
		default:
			t.Fatalf("newLimiter: %T", a)
		}
	}
	l, err := core.NewLimiter(store, policies, opts...)
	require.NoError(t, err)
	return l
}

// failingGuard returns a guard observed by c over a closed memorystore
// (every call fails with core.ErrClosed), opening after 3 failures.
func failingGuard(t testing.TB, c *promlimit.Collector, opts ...guard.Option) *guard.Store {
	t.Helper()
	backend := newMemory(t)
	require.NoError(t, backend.Close())
	opts = append([]guard.Option{guard.WithObserver(c), quiet, guard.WithBreaker(guard.Breaker{Failures: 3, Cooldown: time.Hour})}, opts...)
	gs, err := guard.New(backend, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = gs.Close() })
	return gs
}

// quiet keeps the guard's transitions out of the test output.
var quiet = guard.WithLogger(slog.New(slog.DiscardHandler))

// TestEveryPolicySeriesFromTheStart: the first decision of a policy creates
// its series at zero for every outcome, and the fixed label sets exist
// before anything happens.
func TestEveryPolicySeriesFromTheStart(t *testing.T) {
	c := newCollector(t)
	require.Equal(t, []string{
		`sluice_check_errors_total{reason="context"}`,
		`sluice_check_errors_total{reason="invalid"}`,
		`sluice_check_errors_total{reason="no_key"}`,
		`sluice_check_errors_total{reason="store"}`,
		`sluice_circuit_state{}`,
		`sluice_circuit_transitions_total{to="closed"}`,
		`sluice_circuit_transitions_total{to="half_open"}`,
		`sluice_circuit_transitions_total{to="open"}`,
		`sluice_decision_duration_seconds{}`,
		`sluice_store_errors_total{kind="backend"}`,
		`sluice_store_errors_total{kind="closed"}`,
		`sluice_store_errors_total{kind="connection"}`,
		`sluice_store_errors_total{kind="timeout"}`,
	}, series(t, c))

	l := newLimiter(t, newMemory(t), c, policy("api", core.PerMinute(5)))
	check(t, l, 1)
	var api []string
	for _, s := range series(t, c) {
		if strings.Contains(s, `policy="api"`) {
			api = append(api, s)
		}
	}
	require.Equal(t, []string{
		`sluice_decisions_total{outcome="allowed",policy="api"}`,
		`sluice_decisions_total{outcome="denied",policy="api"}`,
		`sluice_decisions_total{outcome="failed_closed",policy="api"}`,
		`sluice_decisions_total{outcome="failed_open",policy="api"}`,
		`sluice_decisions_total{outcome="fallback",policy="api"}`,
		`sluice_decisions_total{outcome="repeat",policy="api"}`,
		`sluice_decisions_total{outcome="shadow_denied",policy="api"}`,
		`sluice_decisions_total{outcome="warning",policy="api"}`,
		`sluice_deny_cache_hits_total{policy="api"}`,
	}, api)
}

// TestCircuitTransitions walks the breaker of a guard over a closed store
// through open, half-open and open again (a failed probe).
func TestCircuitTransitions(t *testing.T) {
	c := newCollector(t)
	backend := newMemory(t)
	require.NoError(t, backend.Close())
	now := time.Now()
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	gs, err := guard.New(backend, guard.WithObserver(c), quiet, guard.WithClock(clock),
		guard.WithBreaker(guard.Breaker{Failures: 2, Cooldown: time.Second}))
	require.NoError(t, err)
	l := newLimiter(t, gs, c, policy("api", core.PerMinute(5)))

	check(t, l, 2)
	require.Equal(t, guard.Open, gs.Circuit())
	require.Equal(t, 1.0, values(t, c)[`sluice_circuit_state`])

	mu.Lock()
	now = now.Add(time.Second)
	mu.Unlock()
	check(t, l, 1) // the probe, which fails
	require.Equal(t, guard.Open, gs.Circuit())

	got := values(t, c)
	require.Equal(t, 1.0, got[`sluice_circuit_state`])
	require.Equal(t, 2.0, got[`sluice_circuit_transitions_total{to="open"}`], "closed>open, then half_open>open")
	require.Equal(t, 1.0, got[`sluice_circuit_transitions_total{to="half_open"}`])
	require.Equal(t, 3.0, got[`sluice_store_errors_total{kind="closed"}`], "two failures and the probe")
	require.Equal(t, 3.0, got[`sluice_decisions_total{outcome="failed_open",policy="api"}`])
}

// TestBackendFailedKinds: every guard.ErrorKind has its series.
func TestBackendFailedKinds(t *testing.T) {
	c := newCollector(t)
	for i, k := range []guard.ErrorKind{guard.KindTimeout, guard.KindConnection, guard.KindClosed, guard.KindBackend} {
		for range i + 1 {
			c.BackendFailed(k, nil)
		}
	}
	require.Equal(t, map[string]float64{
		`sluice_store_errors_total{kind="timeout"}`:    1,
		`sluice_store_errors_total{kind="connection"}`: 2,
		`sluice_store_errors_total{kind="closed"}`:     3,
		`sluice_store_errors_total{kind="backend"}`:    4,
	}, values(t, c))
}

// TestContextError: a check whose context ended is counted as such.
func TestContextError(t *testing.T) {
	c := newCollector(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c.Decided(ctx, keyfunc.Static{}, nil, time.Millisecond, context.Cause(ctx))
	c.Decided(ctx, keyfunc.Static{}, nil, time.Millisecond, context.DeadlineExceeded)
	got := values(t, c)
	require.Equal(t, 2.0, got[`sluice_check_errors_total{reason="context"}`])
	require.Equal(t, 2.0, got[`sluice_decision_duration_seconds_count`])
}

// TestConcurrentDecisions: many goroutines, policies appearing while they
// run (SetPolicies), and no decision lost.
func TestConcurrentDecisions(t *testing.T) {
	c := newCollector(t)
	l := newLimiter(t, newMemory(t), c, policy("p0", core.PerHour(1_000_000)))
	const workers, each = 4, 300
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if w == 0 && i%100 == 0 {
					n := i/100 + 1
					ps := []core.Policy{policy("p0", core.PerHour(1_000_000))}
					for j := 1; j <= n; j++ {
						ps = append(ps, policy("p"+string(rune('0'+j)), core.PerHour(1_000_000)))
					}
					require.NoError(t, l.SetPolicies(ps))
				}
				_, err := l.Check(context.Background(), keyfunc.Static{})
				require.NoError(t, err)
			}
		}()
	}
	wg.Wait()
	got := values(t, c)
	require.Equal(t, float64(workers*each), got[`sluice_decisions_total{outcome="allowed",policy="p0"}`])
	require.Equal(t, float64(workers*each), got[`sluice_decision_duration_seconds_count`])
	for _, p := range []string{"p1", "p2", "p3"} {
		require.Positive(t, got[`sluice_decisions_total{outcome="allowed",policy="`+p+`"}`], p)
	}
}

// TestNoAllocationPerDecision: once a policy has been seen, Decided
// allocates nothing, on success and on error.
func TestNoAllocationPerDecision(t *testing.T) {
	c := newCollector(t)
	l := newLimiter(t, newMemory(t), c, policy("api", core.PerHour(1_000_000)), policy("burst", core.PerHour(1_000_000)))
	var d core.Decision
	ctx := context.Background()
	require.NoError(t, l.Decide(ctx, keyfunc.Static{}, core.Call{}, &d))
	require.Len(t, d.Results, 2)
	require.Zero(t, testing.AllocsPerRun(1000, func() {
		c.Decided(ctx, keyfunc.Static{}, &d, 3*time.Microsecond, nil)
	}))
	err := l.Decide(ctx, keyfunc.Static{}, core.Call{Cost: -1}, &d)
	require.Error(t, err)
	require.Zero(t, testing.AllocsPerRun(1000, func() {
		c.Decided(ctx, keyfunc.Static{}, &d, 3*time.Microsecond, err)
	}))
}

// TestOptions: the namespace, subsystem, const labels and buckets are
// applied, and bad ones are refused by New.
func TestOptions(t *testing.T) {
	c := newCollector(t, promlimit.WithNamespace("app"), promlimit.WithSubsystem("limits"),
		promlimit.WithConstLabels(prometheus.Labels{"store": "redis-eu"}), promlimit.WithBuckets(0.001, 0.01))
	l := newLimiter(t, newMemory(t), c, policy("api", core.PerMinute(5)))
	check(t, l, 1)
	err := testutil.CollectAndCompare(c, strings.NewReader(`
# HELP app_limits_decisions_total Policy results of rate-limit decisions, by policy and outcome.
# TYPE app_limits_decisions_total counter
app_limits_decisions_total{outcome="allowed",policy="api",store="redis-eu"} 1
app_limits_decisions_total{outcome="denied",policy="api",store="redis-eu"} 0
app_limits_decisions_total{outcome="failed_closed",policy="api",store="redis-eu"} 0
app_limits_decisions_total{outcome="failed_open",policy="api",store="redis-eu"} 0
app_limits_decisions_total{outcome="fallback",policy="api",store="redis-eu"} 0
app_limits_decisions_total{outcome="repeat",policy="api",store="redis-eu"} 0
app_limits_decisions_total{outcome="shadow_denied",policy="api",store="redis-eu"} 0
app_limits_decisions_total{outcome="warning",policy="api",store="redis-eu"} 0
# HELP app_limits_circuit_state State of the guarded store's circuit breaker: 0 closed, 1 open, 2 half-open.
# TYPE app_limits_circuit_state gauge
app_limits_circuit_state{store="redis-eu"} 0
`), "app_limits_decisions_total", "app_limits_circuit_state")
	require.NoError(t, err)

	h := newCollector(t, promlimit.WithBuckets(0.001, 0.01))
	for _, took := range []time.Duration{500 * time.Microsecond, 2 * time.Millisecond, 2 * time.Millisecond, time.Second} {
		h.Decided(context.Background(), keyfunc.Static{}, &core.Decision{Allowed: true}, took, nil)
	}
	err = testutil.CollectAndCompare(h, strings.NewReader(`
# HELP sluice_decision_duration_seconds Time taken by rate-limit checks, errors included.
# TYPE sluice_decision_duration_seconds histogram
sluice_decision_duration_seconds_bucket{le="0.001"} 1
sluice_decision_duration_seconds_bucket{le="0.01"} 3
sluice_decision_duration_seconds_bucket{le="+Inf"} 4
sluice_decision_duration_seconds_sum 1.0045
sluice_decision_duration_seconds_count 4
`), "sluice_decision_duration_seconds")
	require.NoError(t, err)

	bad := []struct {
		name string
		opts []promlimit.Option
		want string
	}{
		{"no bucket", []promlimit.Option{promlimit.WithBuckets()}, "no bucket"},
		{"buckets out of order", []promlimit.Option{promlimit.WithBuckets(0.1, 0.01)}, "must increase"},
		{"bad namespace", []promlimit.Option{promlimit.WithNamespace("my-app")}, "my-app"},
		{"bad subsystem", []promlimit.Option{promlimit.WithSubsystem("9lives")}, "9lives"},
		{"const label clash", []promlimit.Option{promlimit.WithConstLabels(prometheus.Labels{"policy": "x"})}, "policy"},
		{"bad const label", []promlimit.Option{promlimit.WithConstLabels(prometheus.Labels{"1x": "y"})}, "1x"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := promlimit.New(tt.opts...)
			require.ErrorContains(t, err, "promlimit: ")
			require.ErrorContains(t, err, tt.want)
		})
	}
}
