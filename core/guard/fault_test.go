package guard_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/schedlag"
)

// The fault tests run real redis-server processes on loopback. Their
// timeout is generous next to a loopback round trip (~0.1 ms) so that a
// loaded two-core machine running -race does not trip it by itself, and
// the latency bounds allow for the scheduling stalls of such a machine:
// the p99 of a decision must stay within faultTimeout + faultMargin, and
// no decision may take longer than faultTimeout + 2*faultMargin; both
// bounds grow by the largest wake-up delay a schedlag.Probe saw during the
// traffic (a stall of the whole process delays a decision's deadline timer
// as much), which is next to nothing on an idle machine.
const (
	faultTimeout  = 50 * time.Millisecond
	faultMargin   = 100 * time.Millisecond
	faultCooldown = 200 * time.Millisecond
	faultFailures = 3
)

// ---- observing a guard ----

// recorder is a guard.Observer that keeps every transition and counts the
// failures by kind.
type recorder struct {
	mu    sync.Mutex
	trans []string
	kinds map[guard.ErrorKind]int
}

func newRecorder() *recorder { return &recorder{kinds: map[guard.ErrorKind]int{}} }

func (r *recorder) CircuitChanged(from, to guard.Circuit) {
	r.mu.Lock()
	r.trans = append(r.trans, from.String()+"->"+to.String())
	r.mu.Unlock()
}

func (r *recorder) BackendFailed(kind guard.ErrorKind, _ error) {
	r.mu.Lock()
	r.kinds[kind]++
	r.mu.Unlock()
}

// transitions returns the transitions seen so far and forgets them.
func (r *recorder) transitions() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.trans
	r.trans = nil
	return t
}

func (r *recorder) failures(kind guard.ErrorKind) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.kinds[kind]
}

// logBuffer collects a guard's slog output.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// guarded is a guard over its own Redis client and store.
type guarded struct {
	*guard.Store
	rec    *recorder
	log    *logBuffer
	clock  *skewClock // the breaker's clock (the wall clock until advanced)
	client *redis.Client
	rs     *redisstore.Store
}

// clientOptions are the go-redis options of the fault tests: deadlines
// honoured on the sockets and, when failFast is set, no retry of a failed
// dial or command, so that a refused connection fails at once instead of
// being retried until the deadline (go-redis dials 5 times, 100 ms apart,
// and retries a command 3 times by default).
func clientOptions(addr string, failFast bool) *redis.Options {
	o := &redis.Options{Addr: addr, ContextTimeoutEnabled: true}
	if failFast {
		o.MaxRetries, o.DialerRetries = -1, 1
	}
	return o
}

// newGuarded connects with o and wraps the Redis store in a guard with the
// fault tests' timeout and breaker, plus opts.
func newGuarded(t *testing.T, o *redis.Options, opts ...guard.Option) *guarded {
	t.Helper()
	g := &guarded{rec: newRecorder(), log: &logBuffer{}, clock: &skewClock{}}
	g.client = redis.NewClient(o)
	rs, err := redisstore.New(g.client, redisstore.WithTimeout(4*faultTimeout))
	require.NoError(t, err)
	g.rs = rs
	all := append([]guard.Option{
		guard.WithTimeout(faultTimeout),
		guard.WithClock(g.clock.now),
		guard.WithBreaker(guard.Breaker{Failures: faultFailures, Cooldown: faultCooldown}),
		guard.WithObserver(g.rec),
		guard.WithLogger(slog.New(slog.NewTextHandler(g.log, nil))),
	}, opts...)
	g.Store, err = guard.New(rs, all...)
	require.NoError(t, err)
	return g
}

// close releases the guard, the store and the client.
func (g *guarded) close(t *testing.T) {
	t.Helper()
	require.NoError(t, g.Store.Close())
	require.NoError(t, g.rs.Close())
	require.NoError(t, g.client.Close())
}

// ---- an explicit clock ----

// skewClock is the wall clock plus an offset the test moves forward: given
// to a guard (guard.WithClock) it lets the test end a breaker's cooldown at
// once instead of sleeping through it, while the network deadlines, which
// the guard measures on the real clock, are unchanged.
type skewClock struct{ off atomic.Int64 }

func (c *skewClock) now() time.Time { return time.Now().Add(time.Duration(c.off.Load())) }

// advance moves the clock forward by d.
func (c *skewClock) advance(d time.Duration) { c.off.Add(int64(d)) }

// ---- traffic ----

// outcome is one decision made by the traffic.
type outcome struct {
	phase int32
	took  time.Duration
	res   core.Result
	err   error
}

// traffic is steady background load: workers deciding keys of a generous
// limit through the guards in turn, paced, and bounded in count.
type traffic struct {
	phase atomic.Int32
	stop  chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	out   []outcome
	n     atomic.Int64 // decisions made so far
}

// waitFor waits until the workers have made k more decisions: a phase of
// the test lasts a number of decisions, not a time that a loaded machine
// may spend on few of them.
func (tr *traffic) waitFor(t *testing.T, k int64) {
	t.Helper()
	target := tr.n.Load() + k
	require.Eventually(t, func() bool { return tr.n.Load() >= target }, 10*time.Second, time.Millisecond,
		"%d decisions of the background traffic", k)
}

// startTraffic runs workers goroutines, each making a decision every pace
// (at most perWorker of them), until stop.
func startTraffic(stores []*guarded, workers int, pace time.Duration, perWorker int) *traffic {
	tr := &traffic{stop: make(chan struct{})}
	l := core.PerSecond(1_000_000)
	for w := range workers {
		tr.wg.Add(1)
		go func() {
			defer tr.wg.Done()
			g := stores[w%len(stores)]
			outs := make([]outcome, 0, perWorker)
			defer func() {
				tr.mu.Lock()
				tr.out = append(tr.out, outs...)
				tr.mu.Unlock()
			}()
			for i := range perWorker {
				select {
				case <-tr.stop:
					return
				default:
				}
				ph := tr.phase.Load()
				start := time.Now()
				res, err := takeID(context.Background(), g, fmt.Sprintf("steady-%d-%d", w, i%32), l, 1)
				outs = append(outs, outcome{phase: ph, took: time.Since(start), res: res, err: err})
				tr.n.Add(1)
				time.Sleep(pace) // steady load on a real network: a real pace
			}
		}()
	}
	return tr
}

// finish stops the workers and returns every outcome.
func (tr *traffic) finish() []outcome {
	close(tr.stop)
	tr.wg.Wait()
	return tr.out
}

func inPhase(outs []outcome, phases ...int32) []outcome {
	var r []outcome
	for _, o := range outs {
		if slices.Contains(phases, o.phase) {
			r = append(r, o)
		}
	}
	return r
}

// latency summarises the durations of outs.
type latency struct {
	n             int
	p50, p99, max time.Duration
}

func latencyOf(outs []outcome) latency {
	ds := make([]time.Duration, len(outs))
	for i, o := range outs {
		ds[i] = o.took
	}
	slices.Sort(ds)
	at := func(q float64) time.Duration {
		if len(ds) == 0 {
			return 0
		}
		return ds[max(0, int(math.Ceil(q*float64(len(ds))))-1)]
	}
	return latency{n: len(ds), p50: at(0.50), p99: at(0.99), max: at(1)}
}

func (l latency) String() string {
	return fmt.Sprintf("n=%d p50=%s p99=%s max=%s", l.n, l.p50.Round(time.Microsecond),
		l.p99.Round(time.Microsecond), l.max.Round(time.Microsecond))
}

// sources counts outcomes by Result.Source.
func sources(outs []outcome) map[core.Source]int {
	m := map[core.Source]int{}
	for _, o := range outs {
		m[o.res.Source]++
	}
	return m
}

// requireWalk checks that trans is a walk of the breaker's state machine
// (closed->open, open->half_open, half_open->open, half_open->closed) from
// state from, and returns the state it ends in.
func requireWalk(t *testing.T, from string, trans []string) string {
	t.Helper()
	next := map[string][]string{"closed": {"open"}, "open": {"half_open"}, "half_open": {"open", "closed"}}
	at := from
	for _, tr := range trans {
		f, to, _ := strings.Cut(tr, "->")
		require.Equal(t, at, f, "transition %q from state %s in %v", tr, at, trans)
		require.Contains(t, next[f], to, "no transition %q in %v", tr, trans)
		at = to
	}
	return at
}

// ---- goroutines ----

// requireNoLeak waits until the number of goroutines is back to at most
// before (counted as settledGoroutines counts), and fails with every stack
// if it is not within five seconds.
func requireNoLeak(t *testing.T, before int) {
	t.Helper()
	if !assert.Eventually(t, func() bool { return runtime.NumGoroutine() <= before }, 5*time.Second, 20*time.Millisecond) {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Fatalf("goroutines left behind: %d before, %d after\n%s", before, runtime.NumGoroutine(), buf)
	}
}

// settledGoroutines returns the number of goroutines once it stops falling
// over 10 ms (goroutines of earlier tests may still be ending). Both it and
// requireNoLeak count from the goroutine Eventually runs its condition on,
// one more than the test's own.
func settledGoroutines(t *testing.T) int {
	t.Helper()
	n := -1
	require.Eventually(t, func() bool {
		m := runtime.NumGoroutine()
		settled := n >= 0 && m >= n
		n = m
		return settled
	}, 5*time.Second, 10*time.Millisecond, "the goroutines of earlier tests never stopped ending")
	return n
}

// ---- Redis killed and restarted ----

// Redis is killed in the middle of steady traffic through two guards that
// share it, then restarted. With each failure mode the answers while it is
// down are the mode's, no decision waits much longer than the timeout, the
// breaker opens, probes and closes, enforcement through Redis resumes
// (shared by both instances) within seconds of the restart, and no
// goroutine is left behind.
//
// With go-redis's default retries a refused connection is retried until the
// deadline, so the failures are timeouts; with a fail-fast client they are
// connection errors and cost well under the timeout.
func TestRedisKilledAndRestarted(t *testing.T) {
	const closedRetry = 300 * time.Millisecond
	down := core.PerMinute(10) // the limit checked while Redis is down
	for _, tc := range []struct {
		name string
		opt  guard.Option
		// degraded checks one answer given while Redis is down.
		degraded func(t *testing.T, r core.Result)
		// downAllowed is how many of 20 requests on a fresh key under the
		// limit down one instance admits while Redis is down.
		downAllowed int
		failFast    bool
	}{
		{
			name: "open", opt: guard.WithFailOpen(),
			degraded: func(t *testing.T, r core.Result) {
				require.Equal(t, core.FailedOpen, r.Source)
				require.True(t, r.Allowed, "fail open allows")
			},
			downAllowed: 20,
		},
		{
			name: "closed", opt: guard.WithFailClosed(closedRetry),
			degraded: func(t *testing.T, r core.Result) {
				require.Equal(t, core.FailedClosed, r.Source)
				require.False(t, r.Allowed, "fail closed denies")
				require.Equal(t, closedRetry, r.RetryAfter)
			},
			downAllowed: 0,
		},
		{
			// Two instances: each enforces half of the shared limit locally.
			name: "fallback", opt: guard.WithFallback(2),
			degraded: func(t *testing.T, r core.Result) {
				require.Equal(t, core.FromFallback, r.Source)
			},
			downAllowed: 5,
		},
		{
			name: "fallback_fail_fast", opt: guard.WithFallback(2), failFast: true,
			degraded: func(t *testing.T, r core.Result) {
				require.Equal(t, core.FromFallback, r.Source)
			},
			downAllowed: 5,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			before := settledGoroutines(t)
			a := newGuarded(t, clientOptions(srv.Addr, tc.failFast), tc.opt)
			b := newGuarded(t, clientOptions(srv.Addr, tc.failFast), tc.opt)
			ctx := context.Background()

			// Phase 0: Redis up. The clients connect and load the script first,
			// as a running service has long done.
			for _, g := range []*guarded{a, b} {
				require.Eventually(t, func() bool {
					r, err := takeID(ctx, g, "warm", core.PerSecond(1_000_000), 1)
					return err == nil && r.Source == core.FromStore
				}, 2*time.Second, time.Millisecond)
			}
			lag := schedlag.Start(t)
			tr := startTraffic([]*guarded{a, b}, 4, 2*time.Millisecond, 3000)
			tr.waitFor(t, 200)

			// Phase 1: Redis killed (phase 8 while the kill is under way).
			tr.phase.Store(8)
			srv.Kill()
			tr.phase.Store(1)
			require.Eventually(t, func() bool { return a.Circuit() != guard.Closed && b.Circuit() != guard.Closed },
				2*time.Second, time.Millisecond, "the circuits open")
			for _, g := range []*guarded{a, b} {
				allowed := 0
				for range 20 {
					r, err := takeID(ctx, g, "down", down, 1)
					require.NoError(t, err)
					tc.degraded(t, r)
					if r.Allowed {
						allowed++
					}
				}
				require.Equal(t, tc.downAllowed, allowed, "admitted by one instance while Redis is down")
			}
			// Stay down for three cooldowns, ended at once on the guards'
			// clocks: each time a probe is let through, and fails.
			for range 3 {
				for _, g := range []*guarded{a, b} {
					g.clock.advance(faultCooldown + time.Millisecond)
					r, err := takeID(ctx, g, "down-probe", core.PerSecond(1_000_000), 1)
					require.NoError(t, err)
					tc.degraded(t, r)
					// This call or one of the traffic's was the probe.
					require.Eventually(t, func() bool { return g.Circuit() == guard.Open }, 2*time.Second, time.Millisecond,
						"the probe failed: open again")
				}
			}

			// The traffic decides while Redis is down (a fail-fast client
			// makes this phase short enough for a loaded machine not to run
			// the workers at all in it).
			tr.waitFor(t, 20)

			// Phase 2: Redis restarted.
			tr.phase.Store(2)
			srv.Restart(t)
			restarted := time.Now()
			require.Eventually(t, func() bool {
				for _, g := range []*guarded{a, b} {
					r, err := takeID(ctx, g, "probe", core.PerSecond(1_000_000), 1)
					if err != nil || r.Source != core.FromStore {
						return false
					}
				}
				return a.Circuit() == guard.Closed && b.Circuit() == guard.Closed
			}, 5*time.Second, 5*time.Millisecond, "decisions come from Redis again")
			recovery := time.Since(restarted)
			require.Less(t, recovery, 3*time.Second, "enforcement through Redis resumes within seconds")
			tr.phase.Store(3)

			// The shared limit holds again across both instances: 30
			// requests on a fresh key, alternating between them, all decided
			// by Redis, admit exactly 10. (A run in which a stall of the test
			// machine made a call time out is repeated on a new key.)
			attempt := 0
			require.Eventually(t, func() bool {
				attempt++
				key := fmt.Sprintf("shared-%d", attempt)
				allowed := 0
				for i := range 30 {
					r, err := takeID(ctx, []*guarded{a, b}[i%2], key, core.PerMinute(10), 1)
					if err != nil || r.Source != core.FromStore {
						return false
					}
					if r.Allowed {
						allowed++
					}
				}
				if allowed != 10 {
					t.Errorf("%d of 30 admitted under 10 per minute shared by two instances", allowed)
				}
				return true
			}, 5*time.Second, 10*time.Millisecond, "10 per minute, shared by two instances through Redis")
			tr.waitFor(t, 100) // steady traffic after the recovery

			outs := tr.finish()
			for _, o := range outs {
				require.NoError(t, o.err, "a backend failure is never returned")
				if o.res.Source == core.FromStore {
					require.True(t, o.res.Allowed)
				} else {
					tc.degraded(t, o.res)
				}
			}
			// While Redis is up, it decides. (A stall of the test machine
			// longer than the timeout may open a circuit for a cooldown.)
			up := inPhase(outs, 0, 3)
			upSrc := sources(up)
			require.Greater(t, upSrc[core.FromStore], len(up)/2, "Redis decides while it is up: %v", upSrc)
			downOuts := inPhase(outs, 1)
			require.NotEmpty(t, downOuts)
			downSrc := sources(downOuts)
			require.Zero(t, downSrc[core.FromStore], "answered by Redis after the kill: %v", downSrc)

			lag.Stop() // its goroutine is not a leak
			all := latencyOf(outs)
			require.LessOrEqual(t, all.p99, faultTimeout+faultMargin+lag.Max(), "p99 of a decision: %s (scheduling delay seen %s)", all, lag.Max())
			require.LessOrEqual(t, all.max, faultTimeout+2*faultMargin+lag.Max(), "no decision waits much past the timeout: %s (scheduling delay seen %s)", all, lag.Max())
			if tc.failFast {
				require.Less(t, latencyOf(downOuts).p99, faultTimeout, "a fail-fast client does not wait for the timeout")
			}

			for _, g := range []*guarded{a, b} {
				tr := g.rec.transitions()
				requireWalk(t, "closed", tr)
				require.Contains(t, tr, "closed->open", "the circuit opened: %v", tr)
				require.Contains(t, tr, "half_open->open", "a probe failed while Redis was down: %v", tr)
				require.Contains(t, tr, "half_open->closed", "a probe succeeded after the restart: %v", tr)
				conn, timeout := g.rec.failures(guard.KindConnection), g.rec.failures(guard.KindTimeout)
				require.Equal(t, int(g.Stats().Failures), conn+timeout, "every failure is a connection error or a timeout")
				if tc.failFast {
					require.Positive(t, conn, "a fail-fast client reports refused connections")
				}
				logs := g.log.String()
				require.Contains(t, logs, "sluice: backend failing, circuit open")
				require.Contains(t, logs, "sluice: probe failed, circuit open again")
				require.Contains(t, logs, "sluice: backend recovered, circuit closed")
				st := g.Stats()
				require.Positive(t, st.Degraded)
				require.Positive(t, st.Failures)
			}
			t.Logf("%s: before the kill %v %s; after the recovery %v %s; down %v %s; restart to Redis decisions %s",
				tc.name, sources(inPhase(outs, 0)), latencyOf(inPhase(outs, 0)), sources(inPhase(outs, 3)), latencyOf(inPhase(outs, 3)),
				downSrc, latencyOf(downOuts), recovery.Round(time.Millisecond))
			t.Logf("%s: all decisions %s; stats A %+v; failures by kind %v", tc.name, all, a.Stats(), a.rec.kinds)

			a.close(t)
			b.close(t)
			requireNoLeak(t, before)
		})
	}
}

// ---- a faulty network ----

// A loopback proxy between the guards and Redis adds latency, drops every
// connection and stalls. Background traffic measures the latency of every
// decision (p99 stays within the timeout plus a margin); a second guard,
// driven one call at a time, checks that the breaker opens after exactly
// Failures failures, stops calling the backend while open, probes once per
// cooldown and closes on the first successful probe.
func TestFaultyNetwork(t *testing.T) {
	srv := redistest.StartServer(t)
	proxy := newFaultProxy(t, srv.Addr)
	before := settledGoroutines(t)
	load := newGuarded(t, clientOptions(proxy.Addr, false))
	probe := newGuarded(t, clientOptions(proxy.Addr, false))
	ctx := context.Background()
	l := core.PerSecond(1_000_000)
	// take is one decision of g; it is also called from require.Eventually's
	// goroutine, so it reports an error in the Result's Source.
	take := func(g *guarded) (core.Result, time.Duration) {
		start := time.Now()
		r, err := takeID(ctx, g, "probe", l, 1)
		took := time.Since(start)
		if err != nil {
			t.Errorf("Take: %v", err)
			r.Source = core.Source(255)
		}
		return r, took
	}
	// breakDown makes the probe guard fail Failures times in a row and
	// checks that the circuit opens at the last one exactly, then that an
	// open circuit answers at once without a backend call.
	breakDown := func() {
		t.Helper()
		for i := 1; i <= faultFailures; i++ {
			r, took := take(probe)
			require.Equal(t, core.FailedOpen, r.Source, "failure %d", i)
			require.GreaterOrEqual(t, took, faultTimeout, "failure %d waited for the timeout", i)
			if i < faultFailures {
				require.Equal(t, guard.Closed, probe.Circuit(), "after %d failures", i)
			}
		}
		require.Equal(t, guard.Open, probe.Circuit(), "open after %d failures", faultFailures)
		calls := probe.Stats().BackendCalls
		var open []outcome
		for opened := time.Now(); len(open) < 50 && time.Since(opened) < faultCooldown/2; {
			r, took := take(probe)
			require.Equal(t, core.FailedOpen, r.Source)
			open = append(open, outcome{took: took})
		}
		require.Equal(t, calls, probe.Stats().BackendCalls, "no backend call while open")
		require.Less(t, latencyOf(open).p50, time.Millisecond, "an open circuit does not wait for the backend")
	}
	// recover drives the probe guard until its circuit closes.
	recoverCircuit := func() time.Duration {
		t.Helper()
		start := time.Now()
		require.Eventually(t, func() bool {
			r, _ := take(probe)
			return r.Source == core.FromStore && probe.Circuit() == guard.Closed
		}, 3*time.Second, 10*time.Millisecond)
		return time.Since(start)
	}

	// loadProbeFails ends the load guard's cooldown on its clock, once its
	// circuit is open, and waits until the probe its traffic then makes has
	// failed: the circuit is open again after a backend call.
	loadProbeFails := func() {
		t.Helper()
		require.Eventually(t, func() bool { return load.Circuit() == guard.Open }, 3*time.Second, time.Millisecond)
		calls := load.Stats().BackendCalls
		load.clock.advance(faultCooldown + time.Millisecond)
		require.Eventually(t, func() bool { return load.Stats().BackendCalls > calls && load.Circuit() == guard.Open },
			3*time.Second, time.Millisecond, "the load's probe failed")
	}

	lag := schedlag.Start(t)
	tr := startTraffic([]*guarded{load}, 3, 2*time.Millisecond, 4000)

	// Phase 0: clean.
	tr.waitFor(t, 200)
	require.Eventually(t, func() bool { r, _ := take(probe); return r.Source == core.FromStore }, 2*time.Second, 10*time.Millisecond)

	// Phase 1: 5 ms added to every reply, under the timeout: still Redis,
	// 5 ms slower.
	tr.phase.Store(1)
	proxy.SetLatency(5 * time.Millisecond)
	var slowest time.Duration
	require.Eventually(t, func() bool {
		r, took := take(probe)
		slowest = took
		return r.Source == core.FromStore && took >= 5*time.Millisecond
	}, 2*time.Second, 10*time.Millisecond, "Redis decides, 5 ms later")
	tr.waitFor(t, 100)
	requireWalk(t, "closed", probe.rec.transitions())
	require.Equal(t, guard.Closed, probe.Circuit())

	// Phase 2: 4x the timeout added: every call times out, the circuits
	// open; the latency goes away and they close after a cooldown.
	tr.phase.Store(2)
	proxy.SetLatency(4 * faultTimeout)
	breakDown()
	require.Equal(t, []string{"closed->open"}, probe.rec.transitions())
	probe.clock.advance(faultCooldown + time.Millisecond)
	loadProbeFails()
	r, took := take(probe) // the cooldown is over: this call probes, and times out
	require.Equal(t, core.FailedOpen, r.Source)
	require.GreaterOrEqual(t, took, faultTimeout)
	require.Equal(t, guard.Open, probe.Circuit())
	require.Equal(t, []string{"open->half_open", "half_open->open"}, probe.rec.transitions())
	proxy.SetLatency(0)
	tr.phase.Store(3)
	slowRecovery := recoverCircuit()
	trans := probe.rec.transitions()
	require.Equal(t, "closed", requireWalk(t, "open", trans))
	require.Equal(t, "half_open->closed", trans[len(trans)-1])
	require.Positive(t, probe.rec.failures(guard.KindTimeout), "latency failures are timeouts")

	// Phase 4: every connection dropped, five times: the clients reconnect
	// through the proxy; the circuits stay closed or close again.
	tr.phase.Store(4)
	for range 5 {
		proxy.Drop()
		tr.waitFor(t, 20) // the traffic reconnects (or its circuit opens) before the next drop
	}
	require.Eventually(t, func() bool {
		r, _ := take(probe)
		return r.Source == core.FromStore && load.Circuit() == guard.Closed
	}, 3*time.Second, 10*time.Millisecond, "Redis decides again after the drops")
	requireWalk(t, "closed", probe.rec.transitions())
	require.Equal(t, guard.Closed, probe.Circuit())

	// Phase 5: stalled: bytes stop, connections stay open. Calls time out.
	tr.phase.Store(5)
	proxy.Stall()
	breakDown()
	probe.clock.advance(faultCooldown + time.Millisecond)
	loadProbeFails()
	r, _ = take(probe) // probes and times out: still stalled
	require.Equal(t, core.FailedOpen, r.Source)
	require.Equal(t, guard.Open, probe.Circuit())
	stalledLoad := load.Circuit()
	proxy.Resume()
	tr.phase.Store(6)
	stallRecovery := recoverCircuit()
	trans = probe.rec.transitions()
	require.Equal(t, []string{"closed->open", "open->half_open", "half_open->open"}, trans[:3])
	require.Equal(t, "closed", requireWalk(t, "closed", trans))
	require.Eventually(t, func() bool { return load.Circuit() == guard.Closed }, 3*time.Second, 10*time.Millisecond)
	tr.waitFor(t, 100)
	// A stall of this machine longer than the timeout during those may have
	// opened the load's circuit again: its traffic closes it (a probe per
	// cooldown) before it stops.
	require.Eventually(t, func() bool { return load.Circuit() == guard.Closed }, 3*time.Second, time.Millisecond)

	outs := tr.finish()
	for _, o := range outs {
		require.NoError(t, o.err)
		require.True(t, o.res.Allowed)
	}
	names := []string{"clean", "latency 5ms", "latency 200ms", "recovered", "drops", "stalled", "resumed"}
	for ph, name := range names {
		po := inPhase(outs, int32(ph))
		t.Logf("%-13s %s %v", name, latencyOf(po), sources(po))
	}
	require.NotEqual(t, guard.Closed, stalledLoad, "the load's circuit opened during the stall")
	all := latencyOf(outs)
	t.Logf("all decisions %s; a decision with 5 ms added took %s; recovery after latency %s, after stall %s; load stats %+v",
		all, slowest.Round(time.Microsecond), slowRecovery.Round(time.Millisecond), stallRecovery.Round(time.Millisecond), load.Stats())
	lag.Stop() // its goroutine is not a leak
	require.LessOrEqual(t, all.p99, faultTimeout+faultMargin+lag.Max(), "p99 of a decision is bounded by the timeout (scheduling delay seen %s)", lag.Max())
	require.LessOrEqual(t, all.max, faultTimeout+2*faultMargin+lag.Max(), "no decision waits much past the timeout (scheduling delay seen %s)", lag.Max())
	for _, ph := range []int32{2, 5} {
		require.LessOrEqual(t, latencyOf(inPhase(outs, ph)).p99, faultTimeout+faultMargin+lag.Max(), "p99 in phase %s", names[ph])
	}
	lt := load.rec.transitions()
	require.Equal(t, "closed", requireWalk(t, "closed", lt), "load transitions %v", lt)
	require.Contains(t, lt, "half_open->open", "load transitions %v", lt)

	load.close(t)
	probe.close(t)
	proxy.Close()
	requireNoLeak(t, before)
}

// ---- the deny cache against a flood ----

// commandCalls returns how many scripts Redis ran since the last CONFIG
// RESETSTAT: the calls of EVALSHA, EVAL and FCALL (and their _RO forms).
func commandCalls(t *testing.T, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	total := 0
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch name {
		case "cmdstat_evalsha", "cmdstat_eval", "cmdstat_fcall", "cmdstat_evalsha_ro", "cmdstat_eval_ro", "cmdstat_fcall_ro":
		default:
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				var n int
				_, err := fmt.Sscan(v, &n)
				require.NoError(t, err)
				total += n
			}
		}
	}
	return total
}

// flood is one run of a single key flooding at 10 times its limit through
// a guard on its own Redis.
type flood struct {
	admin   *redis.Client
	g       *guard.Store
	results []core.Result
	err     error

	requests, allowed, denied, fromCache int
	redisCalls                           int
	stats                                guard.Stats
}

// newFlood prepares a flood on srv: its statistics reset, a guard (fail
// closed, with a timeout no loopback call reaches) with opts.
func newFlood(t *testing.T, srv *redistest.Server, opts ...guard.Option) *flood {
	t.Helper()
	f := &flood{admin: srv.Client(t)}
	require.NoError(t, f.admin.ConfigResetStat(context.Background()).Err())
	client := srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	// Every decision on its own call, so that INFO commandstats counts
	// decisions (pipelined, several go in one FCALL).
	rs, err := redisstore.New(client, redisstore.WithTimeout(time.Second), redisstore.WithPipelining(0, 0))
	require.NoError(t, err)
	f.g, err = guard.New(rs, append([]guard.Option{guard.WithTimeout(time.Second), guard.WithFailClosed(0)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { f.g.Close() })
	return f
}

// run sends 1000 requests per second for dur on one key of limit l from 4
// paced goroutines.
func (f *flood) run(l core.Limit, dur time.Duration) {
	const workers = 4
	const every = 4 * time.Millisecond // per worker: 4 x 250/s = 1000/s
	n := int(dur / every)
	results := make([][]core.Result, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				at := start.Add(time.Duration(i)*every + time.Duration(w)*every/workers)
				time.Sleep(time.Until(at)) // a real rate: Redis's own clock (TIME) decides
				r, err := takeID(context.Background(), f.g, "flood", l, 1)
				if err != nil {
					errs[w] = err
					return
				}
				results[w] = append(results[w], r)
			}
		}()
	}
	wg.Wait()
	for w := range workers {
		f.results = append(f.results, results[w]...)
	}
	f.err = errors.Join(errs...)
}

// count tallies the run and reads the Redis calls it cost.
func (f *flood) count(t *testing.T) {
	t.Helper()
	require.NoError(t, f.err)
	for _, r := range f.results {
		f.requests++
		switch {
		case r.Allowed:
			f.allowed++
			require.Equal(t, core.FromStore, r.Source, "only Redis admits")
		default:
			f.denied++
			if r.Source == core.FromDenyCache {
				f.fromCache++
			}
		}
	}
	f.redisCalls = commandCalls(t, f.admin)
	f.stats = f.g.Stats()
	require.Zero(t, f.stats.Failures)
	require.Equal(t, f.requests, int(f.stats.BackendCalls+f.stats.DenyCacheHits))
	require.Equal(t, f.fromCache, int(f.stats.DenyCacheHits))
}

// One key flooding at 10 times its limit (1000 requests per second against
// 100 per second, for 2 s), through a guard without and with the deny
// cache, each on its own Redis so that INFO commandstats counts exactly its
// calls. The cache answers the denials Redis already gave; the admissions
// (about a tenth of the requests) must still reach Redis, so the total cut
// is the share of denials answered locally, minus the admissions.
func TestDenyCacheCutsRedisCalls(t *testing.T) {
	const dur = 2 * time.Second
	for _, tc := range []struct {
		name string
		l    core.Limit
		// minLocal is the least share of the denials answered by the cache.
		minLocal float64
		// perAdmission bounds the denials that reach Redis: so many per
		// admission, plus one per window and worker.
		perAdmission int
	}{
		// A denial lasts until the window ends: one Redis denial per window
		// and worker at most.
		{"fixed_window", core.PerSecond(100).WithAlgorithm(core.FixedWindow), 0.95, 0},
		// A denial lasts until the next token (10 ms): one in ten requests is
		// admitted, and the first denial after it reaches Redis.
		// The cache ends a denial at the instant Redis gave, counted from
		// before the call, so the request arriving then often still reaches
		// Redis a little early and is denied again: about two Redis denials
		// per admission.
		{"token_bucket", core.PerSecond(100), 0.50, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			off := newFlood(t, redistest.StartServer(t))
			on := newFlood(t, redistest.StartServer(t), guard.WithDenyCache(guard.DenyCache{MaxKeys: 1000}))
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); off.run(tc.l, dur) }()
			go func() { defer wg.Done(); on.run(tc.l, dur) }()
			wg.Wait()
			off.count(t)
			on.count(t)
			// Without the cache every request is a Redis call. On a fresh
			// server the first call of each of the 4 workers may find no
			// function library yet and be sent again after FUNCTION LOAD
			// (or as EVALSHA, then EVAL): a few calls more.
			const firstCalls = 8
			require.InDelta(t, off.requests, off.redisCalls, firstCalls, "without the cache: %+v", off)
			require.Zero(t, off.fromCache)
			// With it, INFO commandstats agrees with the guard's count.
			require.InDelta(t, int(on.stats.BackendCalls), on.redisCalls, firstCalls, "with the cache: %+v", on)

			totalCut := 1 - float64(on.redisCalls)/float64(off.redisCalls)
			local := float64(on.fromCache) / float64(on.denied)
			deniedByRedis := int(on.stats.BackendCalls) - on.allowed
			t.Logf("%s: %d requests, %d admitted (%.1f%%); Redis calls %d without the cache, %d with it: total cut %.1f%%; "+
				"denials answered locally %d of %d (%.1f%%), denials from Redis %d",
				tc.name, on.requests, on.allowed, 100*float64(on.allowed)/float64(on.requests),
				off.redisCalls, on.redisCalls, 100*totalCut, on.fromCache, on.denied, 100*local, deniedByRedis)
			require.GreaterOrEqual(t, local, tc.minLocal, "share of denials answered without Redis")
			// The bound on the total: every admission plus the denials Redis
			// gave.
			require.LessOrEqual(t, deniedByRedis, tc.perAdmission*on.allowed+12, "denials that reached Redis")
			require.LessOrEqual(t, on.redisCalls, on.allowed+deniedByRedis+firstCalls)
			// The flood is at 10x: the admissions through the cache are about
			// those without it (same limit, same clock, runs side by side).
			require.InDelta(t, off.allowed, on.allowed, float64(off.allowed)/4+10, "admitted without %d, with %d", off.allowed, on.allowed)
		})
	}
}
