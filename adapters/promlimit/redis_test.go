package promlimit_test

import (
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestRedisOutageAndRecovery: a guard over a real redis-server that is
// stopped and started again. The Collector sees the connection failures,
// the circuit open, the requests failed open, the probe, the circuit close
// and enforcement resume.
func TestRedisOutageAndRecovery(t *testing.T) {
	rs := redistest.StartServer(t)
	client := rs.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
	backend, err := redisstore.New(client)
	require.NoError(t, err)
	t.Cleanup(func() { _ = backend.Close() })

	c := newCollector(t)
	now := time.Now()
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	gs, err := guard.New(backend, guard.WithObserver(c), quiet, guard.WithClock(clock),
		guard.WithTimeout(2*time.Second), // a loaded test machine must not time out
		guard.WithBreaker(guard.Breaker{Failures: 2, Cooldown: 5 * time.Second}))
	require.NoError(t, err)
	l := newLimiter(t, gs, c, policy("api", core.PerHour(100)))

	require.Equal(t, 1, check(t, l, 1))
	rs.Stop()
	require.Equal(t, 4, check(t, l, 4), "2 failures, then 2 answers of the open circuit")
	require.Equal(t, guard.Open, gs.Circuit())
	down := values(t, c)
	require.Equal(t, 1.0, down[`sluice_circuit_state`])
	require.Equal(t, 2.0, storeErrors(down), "%v", down)
	require.Equal(t, 4.0, down[`sluice_decisions_total{outcome="failed_open",policy="api"}`])

	rs.Restart(t)
	mu.Lock()
	now = now.Add(5 * time.Second)
	mu.Unlock()
	require.Equal(t, 2, check(t, l, 2), "the probe succeeds, then the backend decides")
	require.Equal(t, guard.Closed, gs.Circuit())

	got := values(t, c)
	require.Equal(t, 2.0, storeErrors(got), "no failure after the recovery")
	for kind := range storeErrorKinds {
		delete(got, kind)
	}
	require.Equal(t, map[string]float64{
		`sluice_decisions_total{outcome="allowed",policy="api"}`:     3,
		`sluice_decisions_total{outcome="failed_open",policy="api"}`: 4,
		`sluice_circuit_transitions_total{to="open"}`:                1,
		`sluice_circuit_transitions_total{to="half_open"}`:           1,
		`sluice_circuit_transitions_total{to="closed"}`:              1,
		`sluice_decision_duration_seconds_count`:                     7,
		`sluice_decision_duration_seconds_sum`:                       -1,
	}, got, "the circuit gauge is back to 0 (closed), so absent")
}

// storeErrorKinds are the series of sluice_store_errors_total. A stopped
// redis-server refuses connections, but go-redis retries the dial until
// redisstore's deadline, so the guard may see a timeout rather than a
// connection error: the tests count failures of any kind.
var storeErrorKinds = map[string]bool{
	`sluice_store_errors_total{kind="timeout"}`:    true,
	`sluice_store_errors_total{kind="connection"}`: true,
	`sluice_store_errors_total{kind="closed"}`:     true,
	`sluice_store_errors_total{kind="backend"}`:    true,
}

func storeErrors(values map[string]float64) float64 {
	n := 0.0
	for kind := range storeErrorKinds {
		n += values[kind]
	}
	return n
}
