package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/service/internal/daemon"
	"github.com/sluicehq/sluice/service/internal/ratelimitdtest"
	"github.com/sluicehq/sluice/service/ratelimitv1"
	"github.com/sluicehq/sluice/service/remotestore"
)

// httpCheck posts one check to the HTTP API and returns the status, the
// decoded body and the headers.
func httpCheck(t *testing.T, p instance, query, body string) (int, map[string]any, http.Header) {
	t.Helper()
	c := apiClient(t, &http.Client{Timeout: 5 * time.Second})
	resp, err := c.Post(p.URL("/api/v1/rate-limit/check"+query), "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m), string(b))
	return resp.StatusCode, m, resp.Header
}

func grpcCheck(ctx context.Context, c ratelimitv1.RateLimitServiceClient, user string) (*ratelimitv1.CheckResponse, error) {
	return c.CheckRateLimit(ctx, &ratelimitv1.CheckRequest{Dimension: "user", Identifier: user, Endpoint: "/api/v1/orders"})
}

// minuteStart is a clock that reads one second past the start of a minute
// at once and then runs at the real pace: the bundled rules count a
// sliding window of one minute, and checks on both sides of its edge would
// see the previous minute's weight instead of a plain count. A test of a
// few seconds on this clock stays clear of the edge.
func minuteStart() func() time.Time {
	now := time.Now()
	shift := now.Truncate(time.Minute).Add(time.Minute + time.Second).Sub(now)
	return func() time.Time { return time.Now().Add(shift) }
}

// TestReadmeDemo is the README's demo: the service started with nothing
// but its defaults (memory store, bundled rules) shows a check allowed, a
// warning and a denial, over gRPC (the check subcommand and a client) and
// over HTTP.
func TestReadmeDemo(t *testing.T) {
	t.Parallel()
	p := ratelimitdtest.StartDaemon(t, serverConfig(t, nil), daemon.WithClock(minuteStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// gRPC, through `ratelimitd check` as the README runs it: 10 per minute
	// per user on /api/**; above 80% a warning.
	var lines []string
	for range 11 {
		code, out, errOut := runCmd(t, nil, "check", "--addr", p.GRPCAddr, "--identifier", "bob", "--endpoint", "/api/v1/orders")
		require.Empty(t, errOut)
		lines = append(lines, out)
		if strings.HasPrefix(out, "denied") {
			require.Equal(t, 1, code, "a denial exits 1")
		} else {
			require.Equal(t, 0, code, out)
		}
	}
	for i, l := range lines {
		want := "allowed  rule=api-per-user"
		switch {
		case i >= 10:
			want = "denied   rule=api-per-user  used=10/10  remaining=0"
		case i >= 8:
			want = "warning  rule=api-per-user"
		}
		require.True(t, strings.HasPrefix(l, want), "check %d: %q", i+1, l)
	}
	require.Contains(t, lines[0], "used=1/10  remaining=9")

	// The same over the native API with a client: peek consumes nothing.
	c := ratelimitv1.NewRateLimitServiceClient(p.Conn(t))
	q, err := c.GetRemainingQuota(ctx, &ratelimitv1.CheckRequest{Dimension: "user", Identifier: "bob", Endpoint: "/api/v1/orders"})
	require.NoError(t, err)
	require.Equal(t, int64(0), q.GetRemaining())
	r, err := grpcCheck(ctx, c, "dave")
	require.NoError(t, err)
	require.True(t, r.GetAllowed())
	require.Equal(t, ratelimitv1.State_STATE_NORMAL, r.GetState())
	require.Equal(t, int64(10), r.GetLimit())

	// HTTP: the JSON API, body mode then status mode.
	body := `{"key_type":"user","key_value":"carol","endpoint":"/api/v1/orders"}`
	var states []string
	for range 11 {
		code, m, hdr := httpCheck(t, p, "", body)
		require.Equal(t, http.StatusOK, code, "body mode answers 200, denial included")
		require.NotEmpty(t, hdr.Get("RateLimit"), "the middleware's header fields")
		states = append(states, fmt.Sprint(m["allowed"], " ", m["state"]))
	}
	require.Equal(t, "true normal", states[0])
	require.Equal(t, "true warning", states[8])
	require.Equal(t, "false throttled", states[10])
	code, m, hdr := httpCheck(t, p, "?mode=status", body)
	require.Equal(t, http.StatusTooManyRequests, code)
	require.NotEmpty(t, hdr.Get("Retry-After"))
	require.Equal(t, false, m["allowed"])

	// Bad input names the field, over both APIs.
	_, err = c.CheckRateLimit(ctx, &ratelimitv1.CheckRequest{Identifier: "x"})
	require.ErrorContains(t, err, "dimension")
	code, m, _ = httpCheck(t, p, "", `{"key_value":"x"}`)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, fmt.Sprint(m), "key_type")

	// The decisions are in the metrics, by rule and outcome.
	// Denied: bob's 11th check and the peek at his empty quota, carol's 11th
	// and her status-mode check.
	require.Equal(t, 4.0, metric(t, p, `ratelimitd_decisions_total{outcome="denied",policy="api-per-user"}`))
	require.Equal(t, 4.0, metric(t, p, `ratelimitd_decisions_total{outcome="warning",policy="api-per-user"}`))
	require.Positive(t, metric(t, p, `ratelimitd_request_duration_seconds_count{api="grpc",code="OK",method="/sluice.ratelimit.v1.RateLimitService/CheckRateLimit"}`))
	// The bad input of each API is counted, though the front doors refused
	// it before the engine saw it; a bad peek by its kind.
	_, err = c.GetRemainingQuota(ctx, &ratelimitv1.CheckRequest{Dimension: "user"})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.Equal(t, 2.0, metric(t, p, `ratelimitd_invalid_requests_total{kind="check"}`), "one over gRPC, one over HTTP")
	require.Equal(t, 1.0, metric(t, p, `ratelimitd_invalid_requests_total{kind="peek"}`))
	require.Equal(t, 0.0, metric(t, p, `ratelimitd_invalid_requests_total{kind="report"}`))

	// `ratelimitd check --http` speaks the HTTP API: a check, then a peek
	// that consumes nothing.
	code, out, errOut := runCmd(t, nil, "check", "--http", p.URL(""), "--identifier", "erin", "--endpoint", "/api/v1/orders")
	require.Empty(t, errOut)
	require.Equal(t, 0, code, out)
	require.True(t, strings.HasPrefix(out, "allowed  rule=api-per-user  used=1/10  remaining=9"), out)
	code, out, errOut = runCmd(t, nil, "check", "--http", p.URL(""), "--identifier", "erin", "--endpoint", "/api/v1/orders", "--peek", "--json")
	require.Empty(t, errOut)
	require.Equal(t, 0, code, out)
	var peek map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &peek), out)
	require.Equal(t, 9.0, peek["remaining"], out)
	require.Equal(t, "api-per-user", peek["rule"], out)
}

// TestSIGTERMReportsNotServingOverGRPC: grpc.health.v1 says NOT_SERVING as
// soon as the drain starts, while calls are still answered.
func TestSIGTERMReportsNotServingOverGRPC(t *testing.T) {
	// Not parallel: it holds the service to a bound in time, measured
	// with no other test of the package running.
	p := ratelimitdtest.Start(t, bin(t), []string{asMain}, "--drain-delay", "2s", "--shutdown-timeout", "2s")
	conn := p.Conn(t)
	hc := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for _, svc := range []string{"", "sluice.ratelimit.v1.RateLimitService", "store", "rules", "draining"} {
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		require.NoError(t, err, svc)
		require.Equal(t, healthpb.HealthCheckResponse_SERVING, r.GetStatus(), svc)
	}
	require.NoError(t, p.Signal(syscall.SIGTERM))
	require.Eventually(t, func() bool {
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		return err == nil && r.GetStatus() == healthpb.HealthCheckResponse_NOT_SERVING
	}, time.Second, 20*time.Millisecond)
	r, err := grpcCheck(ctx, ratelimitv1.NewRateLimitServiceClient(conn), "eve")
	require.NoError(t, err, "calls are still answered while draining")
	require.True(t, r.GetAllowed())
	exit, err := p.Wait(6 * time.Second)
	require.NoError(t, err)
	require.Equal(t, 0, exit, p.Logs())
}

// TestTwoInstancesShareOneRedisLimit: two ratelimitd on one real Redis,
// checks spread across both concurrently, admit exactly the limit.
func TestTwoInstancesShareOneRedisLimit(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	const limit = 40
	writeFile(t, path, fmt.Sprintf("rules:\n  - name: shared\n    dimension: user\n    algorithm: fixed_window\n    rate: %d\n    period: 1h\n", limit))
	// A generous store timeout and fail closed: a slow call on a loaded
	// machine must not admit (fail open) or pass silently.
	args := []string{"--rules", path, "--redis", "redis://" + srv.Addr, "--store-timeout", "2s", "--failure-mode", "closed"}
	a := startServer(t, nil, args...)
	b := startServer(t, nil, args...)
	clients := []ratelimitv1.RateLimitServiceClient{
		ratelimitv1.NewRateLimitServiceClient(a.Conn(t)),
		ratelimitv1.NewRateLimitServiceClient(b.Conn(t)),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const callers, each = 16, 10 // 160 checks for a limit of 40
	var allowed, denied atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, callers*each)
	for i := range callers {
		wg.Go(func() {
			c := clients[i%2]
			for range each {
				r, err := c.CheckRateLimit(ctx, &ratelimitv1.CheckRequest{Dimension: "user", Identifier: "shared-user"})
				if err != nil {
					errs <- err
					return
				}
				if r.GetAllowed() {
					allowed.Add(1)
				} else {
					denied.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, int64(limit), allowed.Load(), "exactly the limit across both instances")
	require.Equal(t, int64(callers*each-limit), denied.Load())
	// Both see the same state.
	for _, c := range clients {
		q, err := c.GetRemainingQuota(ctx, &ratelimitv1.CheckRequest{Dimension: "user", Identifier: "shared-user"})
		require.NoError(t, err)
		require.Equal(t, int64(0), q.GetRemaining())
		require.Equal(t, int64(limit), q.GetCurrent())
	}
}

// leaks reports whether s carries a store error's text.
func leaks(s string) bool {
	s = strings.ToLower(s)
	for _, w := range []string{"redis", "dial", "connection refused", "eof", "127.0.0.1", "timeout", "i/o"} {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

// loadTally counts the answers of one phase of a load test.
type loadTally struct {
	allowed, denied atomic.Int64
	errs            atomic.Int64 // an error instead of an answer
	leaked          atomic.Int64 // an answer or error carrying a store error's text
	inFlight        atomic.Int64
}

// answered is how many checks the phase counted.
func (tl *loadTally) answered() int64 { return tl.allowed.Load() + tl.denied.Load() }

// TestRedisKilledAndRestartedUnderLoad: while Redis is down, checks are
// answered by the failure mode (fail open: allowed; fail closed: denied),
// with no error text in any answer, readiness says the store is down;
// after Redis restarts, Redis decides again.
func TestRedisKilledAndRestartedUnderLoad(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"open", "closed"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testRedisKilledUnderLoad(t, mode)
		})
	}
}

func testRedisKilledUnderLoad(t *testing.T, mode string) {
	srv := redistest.StartServer(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, "rules:\n  - name: per-user\n    dimension: user\n    algorithm: fixed_window\n    rate: 100000\n    period: 1h\n")
	p := startServer(t, nil, "--rules", path, "--redis", srv.Addr,
		"--failure-mode", mode, "--store-timeout", "1s") // generous: a loaded machine must not make a live Redis look failed
	c := ratelimitv1.NewRateLimitServiceClient(p.Conn(t))
	hc := healthpb.NewHealthClient(p.Conn(t))
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	require.Eventually(t, func() bool { code, _ := readyz(t, p); return code == http.StatusOK }, 5*time.Second, 50*time.Millisecond)
	// Warm up: the first call loads the Redis library, which may outlast
	// the store timeout (and be answered by the mode).
	redisDecides(ctx, t, c, "warm-up")

	l := startLoad(p, c)
	l.counted(t, 0, "before the kill")
	l.leave(t, 0, 3)
	srv.Kill()
	l.phase.Store(1)
	require.Eventually(t, func() bool {
		code, r := readyz(t, p)
		return code == http.StatusServiceUnavailable && !r.Store
	}, 5*time.Second, 50*time.Millisecond, "readiness follows the store")
	hr, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, hr.GetStatus())
	l.counted(t, 1, "while Redis is down")

	l.leave(t, 1, 3)
	srv.Restart(t)
	require.Eventually(t, func() bool { code, _ := readyz(t, p); return code == http.StatusOK }, 10*time.Second, 50*time.Millisecond)
	// The breaker's probe closes the circuit within its cooldown.
	redisDecides(ctx, t, c, "probe")
	l.phase.Store(2)
	l.counted(t, 2, "after the restart")
	l.stop()

	tallies := &l.tallies
	requireFailureModeAnswered(t, mode, tallies)
	// Redis counted the checks made after the restart (its state was lost
	// with the kill: no persistence).
	q, err := c.GetRemainingQuota(ctx, &ratelimitv1.CheckRequest{Dimension: "user", Identifier: "load"})
	require.NoError(t, err)
	require.Positive(t, q.GetCurrent())
	allowed := int64(0)
	for i := range tallies {
		allowed += tallies[i].allowed.Load()
	}
	require.LessOrEqual(t, q.GetCurrent(), allowed)
	require.Positive(t, metric(t, p, `ratelimitd_store_errors_total{kind="connection"}`)+
		metric(t, p, `ratelimitd_store_errors_total{kind="timeout"}`))
}

// requireFailureModeAnswered checks the tallies of a load test: no error
// and no store error's text in any answer; Redis allowed every check
// before the kill and after the restart; the failure mode mode answered
// while it was down.
func requireFailureModeAnswered(t *testing.T, mode string, tallies *[4]loadTally) {
	t.Helper()
	before, down, after := &tallies[0], &tallies[1], &tallies[2]
	t.Logf("before %d/%d, down %d allowed %d denied %d errors, after %d/%d",
		before.allowed.Load(), before.denied.Load(), down.allowed.Load(), down.denied.Load(), down.errs.Load(),
		after.allowed.Load(), after.denied.Load())
	for i := range tallies {
		require.Zero(t, tallies[i].leaked.Load(), "no store error text in any answer (phase %d)", i)
		require.Zero(t, tallies[i].errs.Load(), "the failure mode answers, no error (phase %d)", i)
	}
	require.Positive(t, before.allowed.Load())
	require.Zero(t, before.denied.Load())
	if mode == "open" {
		require.Positive(t, down.allowed.Load())
		require.Zero(t, down.denied.Load(), "fail open: allowed")
	} else {
		require.Positive(t, down.denied.Load())
		require.Zero(t, down.allowed.Load(), "fail closed: denied")
	}
	require.Positive(t, after.allowed.Load(), "Redis decides again")
	require.Zero(t, after.denied.Load())
}

// redisDecides waits until a check of user is allowed by Redis, not by a
// failure mode.
func redisDecides(ctx context.Context, t *testing.T, c ratelimitv1.RateLimitServiceClient, user string) {
	t.Helper()
	require.Eventually(t, func() bool {
		r, err := c.CheckRateLimit(ctx, &ratelimitv1.CheckRequest{Dimension: "user", Identifier: user})
		return err == nil && r.GetAllowed() && r.GetDegraded() == ratelimitv1.Degraded_DEGRADED_NONE
	}, 10*time.Second, 20*time.Millisecond, "Redis decides %s's check", user)
}

// loadRun is a load test's load: checks of user "load" from 4 callers,
// one after the other each (one caller over HTTP every other time, the
// rest over gRPC), each counted in the tally of the phase it started in:
// 0 before Redis is killed, 1 while it is down, 2 after its restart, 3 in
// between (answers counted only for errors and leaks).
type loadRun struct {
	phase   atomic.Int32
	tallies [4]loadTally
	done    chan struct{}
	wg      sync.WaitGroup
}

// startLoad starts the load on p (c its gRPC client), in phase 0.
func startLoad(p instance, c ratelimitv1.RateLimitServiceClient) *loadRun {
	l := &loadRun{done: make(chan struct{})}
	for g := range 4 {
		l.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-l.done:
					return
				default:
				}
				tl := &l.tallies[l.phase.Load()]
				tl.inFlight.Add(1)
				loadCheck(p, c, tl, g == 0 && i%2 == 0)
				tl.inFlight.Add(-1)
			}
		})
	}
	return l
}

// counted waits until phase ph has counted enough answers.
func (l *loadRun) counted(t *testing.T, ph int, what string) {
	t.Helper()
	require.Eventually(t, func() bool { return l.tallies[ph].answered() >= 20 }, 10*time.Second, time.Millisecond, what)
}

// leave moves from phase ph to next, then waits until none of ph's checks
// is in flight.
func (l *loadRun) leave(t *testing.T, ph, next int32) {
	t.Helper()
	l.phase.Store(next)
	require.Eventually(t, func() bool { return l.tallies[ph].inFlight.Load() == 0 }, 10*time.Second, time.Millisecond)
}

// stop ends the load and waits for its callers.
func (l *loadRun) stop() {
	close(l.done)
	l.wg.Wait()
}

// loadCheck sends one check of user "load" and counts its answer in tl.
func loadCheck(p instance, c ratelimitv1.RateLimitServiceClient, tl *loadTally, overHTTP bool) {
	var allowed bool
	var err error
	if overHTTP {
		allowed, err = loadCheckHTTP(p)
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var r *ratelimitv1.CheckResponse
		r, err = c.CheckRateLimit(ctx, &ratelimitv1.CheckRequest{Dimension: "user", Identifier: "load"})
		allowed = err == nil && r.GetAllowed()
	}
	switch {
	case err != nil:
		tl.errs.Add(1)
		if leaks(err.Error()) {
			tl.leaked.Add(1)
		}
	case allowed:
		tl.allowed.Add(1)
	default:
		tl.denied.Add(1)
	}
}

// loadCheckHTTP sends one check of user "load" to the HTTP API; an
// answer other than 200, or one carrying a store error's text, is an
// error.
func loadCheckHTTP(p instance) (allowed bool, err error) {
	c := &http.Client{Timeout: 10 * time.Second} // a load: not validated, as it would slow what it measures
	resp, err := c.Post(p.URL("/api/v1/rate-limit/check"), "application/json", strings.NewReader(`{"key_type":"user","key_value":"load"}`))
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	switch {
	case err != nil:
		return false, err
	case leaks(string(b)):
		return false, fmt.Errorf("a store error in the answer: %s", b)
	case resp.StatusCode != http.StatusOK:
		return false, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	var m struct{ Allowed bool }
	err = json.Unmarshal(b, &m)
	return m.Allowed, err
}

// TestStoreAPIServesTheMiddleware: a middleware's limiter whose store is
// ratelimitd (remotestore over its gRPC address, behind a guard) shares
// the service's state: two such limiters admit the limit once between them.
func TestStoreAPIServesTheMiddleware(t *testing.T) {
	t.Parallel()
	p := startServer(t, nil)
	newLimiter := func() *core.Limiter {
		store, err := guard.New(remotestore.New(p.Conn(t)), guard.WithTimeout(2*time.Second), guard.WithFailClosed(time.Second))
		require.NoError(t, err)
		t.Cleanup(func() { _ = store.Close() })
		lim, err := core.NewLimiter(store, []core.Policy{{Name: "app-per-user", Key: keyfunc.Header("X-User"), Limit: core.PerMinute(3)}})
		require.NoError(t, err)
		return lim
	}
	a, b := newLimiter(), newLimiter()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []bool
	for i := range 6 {
		lim := a
		if i%2 == 1 {
			lim = b
		}
		r, err := lim.Allow(ctx, "app-per-user", "alice")
		require.NoError(t, err)
		require.Equal(t, core.Result{}.Source, r.Source, "decided by ratelimitd's store, not a failure mode")
		got = append(got, r.Allowed)
	}
	require.Equal(t, []bool{true, true, true, false, false, false}, got)

	// --store-api=false: the store API is not served.
	off := startServer(t, nil, "--store-api=false")
	err := remotestore.New(off.Conn(t)).Take(ctx, []core.Op{{Key: core.Key{Identity: "alice", Policy: "p"}, Limit: core.PerMinute(3), Cost: 1}}, make([]core.Result, 1))
	require.ErrorContains(t, err, "Unimplemented")
}

// TestFallbackModeDecidesLocallyWhileRedisIsDown: in fallback mode a dead
// Redis is replaced by a local limiter whose limit is divided by the
// number of instances.
func TestFallbackModeDecidesLocallyWhileRedisIsDown(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, "rules:\n  - name: per-user\n    dimension: user\n    algorithm: fixed_window\n    rate: 10\n    period: 1h\n")
	p := startServer(t, nil, "--rules", path, "--redis", srv.Addr,
		"--failure-mode", "fallback", "--fallback-instances", "2", "--store-timeout", "200ms")
	c := ratelimitv1.NewRateLimitServiceClient(p.Conn(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := c.CheckRateLimit(ctx, &ratelimitv1.CheckRequest{Dimension: "user", Identifier: "warm-up"})
	require.NoError(t, err)
	require.True(t, r.GetAllowed())

	srv.Kill()
	var allowed int
	for range 8 {
		r, err := c.CheckRateLimit(ctx, &ratelimitv1.CheckRequest{Dimension: "user", Identifier: "frank"})
		require.NoError(t, err)
		if r.GetAllowed() {
			allowed++
		}
	}
	require.Equal(t, 5, allowed, "10 per hour over 2 instances: 5 here while Redis is down")
	require.Positive(t, metric(t, p, `ratelimitd_decisions_total{outcome="fallback",policy="per-user"}`))
}

// TestRedisDeployments: --redis takes a Sentinel deployment and a Cluster
// in its documented syntax; limits are exact on both.
func TestRedisDeployments(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, "rules:\n  - name: per-user\n    dimension: user\n    algorithm: fixed_window\n    rate: 5\n    period: 1h\n")
	for _, tc := range []struct {
		name string
		addr func(t *testing.T) string
	}{
		{"sentinel", func(t *testing.T) string {
			s := redistest.StartSentinel(t)
			var addrs []string
			for _, srv := range s.Sentinels {
				addrs = append(addrs, srv.Addr)
			}
			return "redis-sentinel://" + s.MasterName + "@" + strings.Join(addrs, ",")
		}},
		{"cluster", func(t *testing.T) string {
			return "redis-cluster://" + strings.Join(redistest.StartCluster(t, 3).Addrs(), ",")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := startServer(t, nil, "--rules", path, "--redis", tc.addr(t),
				"--failure-mode", "closed", "--store-timeout", "2s")
			require.Eventually(t, func() bool { code, _ := readyz(t, p); return code == http.StatusOK }, 10*time.Second, 50*time.Millisecond)
			c := ratelimitv1.NewRateLimitServiceClient(p.Conn(t))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var got []bool
			for _, user := range []string{"a", "a", "a", "a", "a", "a", "b"} {
				r, err := c.CheckRateLimit(ctx, &ratelimitv1.CheckRequest{Dimension: "user", Identifier: user})
				require.NoError(t, err)
				got = append(got, r.GetAllowed())
			}
			require.Equal(t, []bool{true, true, true, true, true, false, true}, got)
			require.Equal(t, 0.0, metric(t, p, `ratelimitd_decisions_total{outcome="failed_closed",policy="per-user"}`), "decided by Redis")
		})
	}
}

// TestStartsWithRedisDown: ratelimitd starts while its Redis is down,
// reports not ready, and answers by its failure mode meanwhile; with
// --log-format json every line it writes is a JSON object (go-redis's own
// dial-failure lines are silenced: the guard logs the failure).
func TestStartsWithRedisDown(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now
	p := ratelimitdtest.Start(t, bin(t), []string{asMain}, "--redis", dead, "--failure-mode", "closed", "--log-format", "json")
	require.Eventually(t, func() bool {
		code, r := readyz(t, p)
		return code == http.StatusServiceUnavailable && !r.Store && r.Rules
	}, 5*time.Second, 50*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := grpcCheck(ctx, ratelimitv1.NewRateLimitServiceClient(p.Conn(t)), "gina")
	require.NoError(t, err)
	require.False(t, r.GetAllowed(), "fail closed")
	require.False(t, leaks(r.String()), r.String())
	logs := strings.TrimSpace(p.Logs())
	require.NotEmpty(t, logs)
	for line := range strings.SplitSeq(logs, "\n") {
		require.True(t, json.Valid([]byte(line)), "a log line that is not JSON: %q", line)
	}
}
