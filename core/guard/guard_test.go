package guard_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// switchable is a real memory store that can be made to fail: the way a
// backend fails is the only thing these unit tests need to control (the
// Redis fault tests are in fault_test.go).
type switchable struct {
	*memorystore.Store
	err   atomic.Pointer[error]
	calls atomic.Int64
}

func (s *switchable) failWith(err error) {
	if err == nil {
		s.err.Store(nil)
		return
	}
	s.err.Store(&err)
}

func (s *switchable) Take(ctx context.Context, ops []core.Op, out []core.Result) error {
	s.calls.Add(1)
	if e := s.err.Load(); e != nil {
		return *e
	}
	return s.Store.Take(ctx, ops, out)
}

func (s *switchable) Refund(ctx context.Context, a core.Admission) error {
	s.calls.Add(1)
	if e := s.err.Load(); e != nil {
		return *e
	}
	return s.Store.Refund(ctx, a)
}

// takeID is a one-op Take of the identity id under the policy "p".
func takeID(ctx context.Context, s core.Store, id string, l core.Limit, cost int64) (core.Result, error) {
	return limitertest.TakeOne(ctx, s, core.Key{Identity: id, Policy: "p"}, l, cost)
}

// key is the Key takeID takes.
func key(id string) core.Key { return core.Key{Identity: id, Policy: "p"} }

func newBackend(t *testing.T, c *limitertest.Clock) *switchable {
	t.Helper()
	m, err := memorystore.New(memorystore.WithClock(c.Now))
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return &switchable{Store: m}
}

func newGuard(t *testing.T, backend core.Store, opts ...guard.Option) *guard.Store {
	t.Helper()
	g, err := guard.New(backend, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { g.Close() })
	return g
}

type transitions struct {
	mu   sync.Mutex
	seen []string
	errs map[guard.ErrorKind]int
}

func (o *transitions) CircuitChanged(from, to guard.Circuit) {
	o.mu.Lock()
	o.seen = append(o.seen, from.String()+">"+to.String())
	o.mu.Unlock()
}

func (o *transitions) BackendFailed(kind guard.ErrorKind, _ error) {
	o.mu.Lock()
	if o.errs == nil {
		o.errs = map[guard.ErrorKind]int{}
	}
	o.errs[kind]++
	o.mu.Unlock()
}

func (o *transitions) list() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.seen...)
}

func TestNewRejectsBadOptions(t *testing.T) {
	m, err := memorystore.New()
	require.NoError(t, err)
	defer m.Close()
	cases := []struct {
		opt  guard.Option
		want string
	}{
		{guard.WithTimeout(0), "WithTimeout: must be positive"},
		{guard.WithFailClosed(-time.Second), "WithFailClosed: retry must not be negative"},
		{guard.WithFallback(0), "WithFallback: instances must be at least 1"},
		{guard.WithBreaker(guard.Breaker{Failures: -1}), "Breaker.Failures"},
		{guard.WithBreaker(guard.Breaker{Cooldown: -1}), "Breaker.Cooldown"},
		{guard.WithDenyCache(guard.DenyCache{}), "DenyCache.MaxKeys: must be positive"},
		{guard.WithDenyCache(guard.DenyCache{MaxKeys: 1, MaxTTL: -1}), "DenyCache.MaxTTL"},
	}
	for _, c := range cases {
		_, err := guard.New(m, c.opt)
		require.ErrorContains(t, err, c.want)
	}
	_, err = guard.New(nil)
	require.Error(t, err)
}

func TestModesAnswerFailures(t *testing.T) {
	lim := core.PerMinute(10)
	down := fmt.Errorf("redis: %w", syscall.ECONNREFUSED)
	cases := []struct {
		name  string
		opt   guard.Option
		check func(t *testing.T, rs []core.Result)
	}{
		{"open", guard.WithFailOpen(), func(t *testing.T, rs []core.Result) {
			for _, r := range rs {
				require.True(t, r.Allowed)
				require.Equal(t, core.FailedOpen, r.Source)
				require.True(t, r.Source.Degraded())
			}
		}},
		{"closed", guard.WithFailClosed(3 * time.Second), func(t *testing.T, rs []core.Result) {
			for _, r := range rs {
				require.False(t, r.Allowed)
				require.Equal(t, core.FailedClosed, r.Source)
				require.Equal(t, 3*time.Second, r.RetryAfter)
				require.Equal(t, int64(10), r.Capacity)
				require.Equal(t, core.Throttled, r.State)
			}
		}},
		{"fallback divides the limit by the instances", guard.WithFallback(4), func(t *testing.T, rs []core.Result) {
			allowed := 0
			for _, r := range rs {
				require.Equal(t, core.FromFallback, r.Source)
				require.Equal(t, int64(3), r.Capacity) // ceil(10/4)
				if r.Allowed {
					allowed++
				}
			}
			require.Equal(t, 3, allowed)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := limitertest.NewClock()
			b := newBackend(t, clk)
			b.failWith(down)
			var obs transitions
			g := newGuard(t, b, c.opt, guard.WithClock(clk.Now), guard.WithObserver(&obs),
				guard.WithLogger(slog.New(slog.DiscardHandler)))
			var rs []core.Result
			for range 8 {
				r, err := takeID(context.Background(), g, "k", lim, 1)
				require.NoError(t, err, "a backend failure is never returned")
				rs = append(rs, r)
			}
			c.check(t, rs)
			require.Equal(t, guard.DefaultFailures, obs.errs[guard.KindConnection])
			require.Equal(t, int64(guard.DefaultFailures), b.calls.Load(), "the open circuit spares the backend")
			st := g.Stats()
			require.Equal(t, uint64(8), st.Degraded)
			require.Equal(t, uint64(guard.DefaultFailures), st.Failures)
		})
	}
}

func TestCallerErrorsPassThrough(t *testing.T) {
	clk := limitertest.NewClock()
	b := newBackend(t, clk)
	g := newGuard(t, b)
	_, err := takeID(context.Background(), g, "k", core.Limit{}, 1)
	require.ErrorIs(t, err, core.ErrInvalidLimit)
	_, err = takeID(context.Background(), g, "", core.PerSecond(1), 1)
	require.ErrorIs(t, err, core.ErrNoKey)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b.failWith(context.Canceled)
	_, err = takeID(ctx, g, "k", core.PerSecond(1), 1)
	require.ErrorIs(t, err, context.Canceled)
	require.Zero(t, g.Stats().Failures, "the caller's own errors are not backend failures")
	require.Equal(t, guard.Closed, g.Circuit())
}

func TestBreakerOpensProbesAndCloses(t *testing.T) {
	clk := limitertest.NewClock()
	b := newBackend(t, clk)
	var obs transitions
	var logs bytes.Buffer
	g := newGuard(t, b, guard.WithClock(clk.Now), guard.WithObserver(&obs),
		guard.WithBreaker(guard.Breaker{Failures: 3, Cooldown: 2 * time.Second}),
		guard.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	ctx := context.Background()
	lim := core.PerSecond(1000)
	take := func() core.Result {
		t.Helper()
		r, err := takeID(ctx, g, "k", lim, 1)
		require.NoError(t, err)
		return r
	}
	require.Equal(t, core.FromStore, take().Source)
	b.failWith(errors.New("LOADING Redis is loading the dataset in memory"))
	for range 2 {
		require.Equal(t, core.FailedOpen, take().Source)
		require.Equal(t, guard.Closed, g.Circuit(), "below the threshold")
	}
	take()
	require.Equal(t, guard.Open, g.Circuit())
	calls := b.calls.Load()
	for range 100 {
		take()
	}
	require.Equal(t, calls, b.calls.Load(), "no call reaches the backend while open")

	clk.Advance(2 * time.Second) // cooldown over; the backend still fails
	take()
	require.Equal(t, calls+1, b.calls.Load(), "exactly one probe")
	require.Equal(t, guard.Open, g.Circuit())
	take()
	require.Equal(t, calls+1, b.calls.Load(), "a failed probe restarts the cooldown")

	b.failWith(nil)
	clk.Advance(2 * time.Second)
	require.Equal(t, core.FromStore, take().Source, "the probe's answer is the backend's")
	require.Equal(t, guard.Closed, g.Circuit())
	require.Equal(t, core.FromStore, take().Source)

	require.Equal(t, []string{
		"closed>open", "open>half_open", "half_open>open", "open>half_open", "half_open>closed",
	}, obs.list())
	require.Equal(t, 4, obs.errs[guard.KindBackend])
	out := logs.String()
	for _, want := range []string{"circuit open", "half-open", "probe failed", "circuit closed"} {
		require.Contains(t, out, want)
	}
}

func TestOneProbeAtATime(t *testing.T) {
	clk := limitertest.NewClock()
	b := newBackend(t, clk)
	g := newGuard(t, b, guard.WithClock(clk.Now), guard.WithBreaker(guard.Breaker{Failures: 1, Cooldown: time.Second}),
		guard.WithLogger(slog.New(slog.DiscardHandler)))
	b.failWith(io.EOF)
	_, err := takeID(context.Background(), g, "k", core.PerSecond(5), 1)
	require.NoError(t, err)
	require.Equal(t, guard.Open, g.Circuit())
	clk.Advance(time.Second)
	before := b.calls.Load()
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := takeID(context.Background(), g, "k", core.PerSecond(5), 1)
			require.NoError(t, err)
		}()
	}
	wg.Wait()
	require.Equal(t, before+1, b.calls.Load(), "32 concurrent callers after the cooldown send one probe")
}

func TestTimeoutIsAFailure(t *testing.T) {
	clk := limitertest.NewClock()
	b := newBackend(t, clk)
	slow := &stalling{switchable: b}
	var obs transitions
	g := newGuard(t, slow, guard.WithTimeout(20*time.Millisecond), guard.WithObserver(&obs),
		guard.WithLogger(slog.New(slog.DiscardHandler)))
	start := time.Now()
	r, err := takeID(context.Background(), g, "k", core.PerSecond(5), 1)
	require.NoError(t, err)
	require.Less(t, time.Since(start), time.Second)
	require.Equal(t, core.FailedOpen, r.Source)
	require.Equal(t, 1, obs.errs[guard.KindTimeout])
}

// stalling waits for its context to end, like a backend that never answers.
type stalling struct{ *switchable }

func (s *stalling) Take(ctx context.Context, _ []core.Op, _ []core.Result) error {
	<-ctx.Done()
	return fmt.Errorf("stalled: %w", ctx.Err())
}

func TestFallbackGroupsAndRecovery(t *testing.T) {
	clk := limitertest.NewClock()
	b := newBackend(t, clk)
	g := newGuard(t, b, guard.WithClock(clk.Now), guard.WithFallback(2),
		guard.WithBreaker(guard.Breaker{Failures: 1, Cooldown: time.Second}),
		guard.WithLogger(slog.New(slog.DiscardHandler)))
	l, err := core.NewLimiter(g, []core.Policy{
		{Name: "ip", Key: keyfunc.Header("X-Client"), Limit: core.PerMinute(10)},
		{Name: "all", Key: keyfunc.Const("all"), Limit: core.PerMinute(100)},
	})
	require.NoError(t, err)
	req := keyfunc.Static{Headers: map[string][]string{"X-Client": {"a"}}}
	ctx := context.Background()
	b.failWith(syscall.ECONNRESET)
	allowed := 0
	for range 20 {
		d, err := l.Check(ctx, req)
		require.NoError(t, err)
		require.Equal(t, core.FromFallback, d.Results[0].Source)
		if d.Allowed {
			allowed++
		}
	}
	require.Equal(t, 5, allowed, "the local share of 10 per minute over 2 instances")

	b.failWith(nil)
	clk.Advance(time.Second)
	d, err := l.Check(ctx, req)
	require.NoError(t, err)
	require.True(t, d.Allowed, "the backend's own count starts fresh")
	require.Equal(t, core.FromStore, d.Results[0].Source)
	require.Equal(t, int64(9), d.Results[0].Remaining)
}

// TestDenyCacheIsExact drives the same random requests through a Limiter on
// a guarded store with a deny cache and through one on a plain store: with
// one instance, a cached denial is exactly what the store would have said,
// so every decision matches, while the backend sees far fewer calls.
func TestDenyCacheIsExact(t *testing.T) {
	for _, alg := range limitertest.Algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clk := limitertest.NewClock()
			plainStore := newBackend(t, clk)
			cached := newBackend(t, clk)
			g := newGuard(t, cached, guard.WithClock(clk.Now), guard.WithDenyCache(guard.DenyCache{MaxKeys: 64}))
			policies := func() []core.Policy {
				return []core.Policy{
					{Name: "client", Key: keyfunc.Header("X-Client"), Limit: core.PerSecond(5).WithAlgorithm(alg)},
					{Name: "route", Key: keyfunc.Route(), Limit: core.PerSecond(40).WithAlgorithm(alg), Match: core.Match{Routes: []string{"/a"}}},
				}
			}
			plain, err := core.NewLimiter(plainStore, policies())
			require.NoError(t, err)
			guarded, err := core.NewLimiter(g, policies())
			require.NoError(t, err)
			rng := rand.New(rand.NewPCG(1, uint64(alg)))
			ctx := context.Background()
			hits := 0
			for i := range 4000 {
				clk.Advance(time.Duration(rng.IntN(20_000)) * time.Microsecond)
				path := []string{"/a", "/b"}[rng.IntN(2)]
				req := keyfunc.Static{
					PathName: path, RouteName: path,
					Headers: map[string][]string{"X-Client": {fmt.Sprint(rng.IntN(3))}},
				}
				cost := int64(1 + rng.IntN(2))
				want, err := plain.CheckWith(ctx, req, core.Call{Cost: cost})
				require.NoError(t, err)
				got, err := guarded.CheckWith(ctx, req, core.Call{Cost: cost})
				require.NoError(t, err)
				require.Equal(t, want.Allowed, got.Allowed, "request %d", i)
				for j := range want.Results {
					w, g := want.Results[j], got.Results[j]
					require.Equal(t, w.Allowed, g.Allowed, "request %d policy %s", i, w.Policy)
					if g.Source == core.FromDenyCache {
						hits++
						if !g.Allowed {
							require.InDelta(t, w.RetryAfter, g.RetryAfter, float64(time.Microsecond), "request %d", i)
						}
						continue
					}
					// The warning state's hysteresis is written by every
					// call, denials included: calls the cache spared leave
					// it behind, so State and Previous may differ in the
					// band between the thresholds. Everything else matches.
					w.State, w.Previous, g.State, g.Previous = 0, 0, 0, 0
					require.Equal(t, w.Result, g.Result, "request %d", i)
				}
			}
			require.Positive(t, hits)
			st := g.Stats()
			require.Less(t, st.BackendCalls, uint64(4000), "denials were answered locally")
			require.Equal(t, uint64(4000), st.BackendCalls+st.DenyCacheHits)
		})
	}
}

func TestDenyCacheBoundsAndForgets(t *testing.T) {
	clk := limitertest.NewClock()
	b := newBackend(t, clk)
	g := newGuard(t, b, guard.WithClock(clk.Now), guard.WithDenyCache(guard.DenyCache{MaxKeys: 32, MaxTTL: time.Second}))
	ctx := context.Background()
	lim := core.PerHour(1)
	for i := range 1000 {
		key := fmt.Sprint("k", i)
		_, err := takeID(ctx, g, key, lim, 1)
		require.NoError(t, err)
		r, err := takeID(ctx, g, key, lim, 1)
		require.NoError(t, err)
		require.False(t, r.Allowed)
	}
	require.LessOrEqual(t, guard.DenyCacheLen(g), 32)

	first, _ := takeID(ctx, g, "x", lim, 1)
	r, _ := takeID(ctx, g, "x", lim, 1)
	require.Equal(t, core.FromStore, r.Source)
	require.Equal(t, time.Hour, r.RetryAfter)
	r, _ = takeID(ctx, g, "x", lim, 1)
	require.Equal(t, core.FromDenyCache, r.Source)
	calls := b.calls.Load()
	clk.Advance(time.Second) // MaxTTL: asks the backend again
	r, _ = takeID(ctx, g, "x", lim, 1)
	require.Equal(t, core.FromStore, r.Source)
	require.Equal(t, calls+1, b.calls.Load())
	require.Equal(t, time.Hour-time.Second, r.RetryAfter)

	// A refund through the guard forgets the denial at once.
	require.NoError(t, g.Refund(ctx, core.Admission{Key: key("x"), Limit: lim, Cost: 1, At: first.At}))
	r, _ = takeID(ctx, g, "x", lim, 1)
	require.True(t, r.Allowed)
	require.Equal(t, core.FromStore, r.Source)

	// Another cost than the one denied is not answered by the cache.
	big := core.PerHour(10)
	r, _ = takeID(ctx, g, "y", big, 10)
	require.True(t, r.Allowed)
	r, _ = takeID(ctx, g, "y", big, 5)
	require.False(t, r.Allowed)
	r, _ = takeID(ctx, g, "y", big, 1)
	require.Equal(t, core.FromStore, r.Source)
	require.False(t, r.Allowed)
}

func TestOverridesGoThrough(t *testing.T) {
	clk := limitertest.NewClock()
	b := newBackend(t, clk)
	g := newGuard(t, b, guard.WithClock(clk.Now), guard.WithDenyCache(guard.DenyCache{MaxKeys: 8}))
	ctx := context.Background()
	lim := core.PerHour(1)
	_, _ = takeID(ctx, g, "k", lim, 1)
	r, _ := takeID(ctx, g, "k", lim, 1)
	require.False(t, r.Allowed)
	require.NoError(t, g.SetOverride(ctx, key("k"), core.Override{Limit: core.PerHour(5), Until: clk.Now().Add(time.Hour)}))
	r, _ = takeID(ctx, g, "k", lim, 1)
	require.True(t, r.Allowed, "a raise through the guard clears the cached denial")
	require.NoError(t, g.ClearOverride(ctx, key("k")))
	require.NoError(t, g.Reset(ctx, key("k"), lim))
	r, _ = takeID(ctx, g, "k", lim, 1)
	require.True(t, r.Allowed)

}

// Overrides set through the guard hold in its fallback limiter too (their
// limit divided by the instances, as every limit there): a block stays a
// block, and a raise stays a raise, while the backend is down.
func TestOverridesHoldInTheFallback(t *testing.T) {
	clk := limitertest.NewClock()
	b := newBackend(t, clk)
	g := newGuard(t, b, guard.WithClock(clk.Now), guard.WithFallback(2),
		guard.WithBreaker(guard.Breaker{Failures: 1, Cooldown: time.Hour}),
		guard.WithLogger(slog.New(slog.DiscardHandler)))
	ctx := context.Background()
	lim := core.PerHour(2) // 1 per instance in the fallback
	require.NoError(t, g.SetOverride(ctx, key("blocked"), core.Override{Until: clk.Now().Add(time.Hour)}))
	require.NoError(t, g.SetOverride(ctx, key("raised"), core.Override{Limit: core.PerHour(10), Until: clk.Now().Add(time.Hour)}))
	b.failWith(errors.New("down"))
	r, err := takeID(ctx, g, "blocked", lim, 1)
	require.NoError(t, err)
	require.Equal(t, core.FromFallback, r.Source)
	require.False(t, r.Allowed, "the block holds in the fallback")
	for i := range 5 {
		r, err = takeID(ctx, g, "raised", lim, 1)
		require.NoError(t, err)
		require.True(t, r.Allowed, "request %d of the raised limit's local share (5)", i)
	}
	r, err = takeID(ctx, g, "raised", lim, 1)
	require.NoError(t, err)
	require.False(t, r.Allowed)
	require.NoError(t, g.ClearOverride(ctx, key("blocked")))
	r, err = takeID(ctx, g, "blocked", lim, 1)
	require.NoError(t, err)
	require.True(t, r.Allowed, "cleared in the fallback too")
}

// A refund passes through the circuit of its key: refused at once (no
// backend call, nothing given back, no error) while the circuit is open,
// and, when it fails, counted as a failure that opens it, like a decision.
func TestRefundPassesThroughTheCircuit(t *testing.T) {
	clk := limitertest.NewClock()
	b := newBackend(t, clk)
	var obs transitions
	g := newGuard(t, b, guard.WithClock(clk.Now), guard.WithObserver(&obs),
		guard.WithBreaker(guard.Breaker{Failures: 2, Cooldown: time.Second}),
		guard.WithLogger(slog.New(slog.DiscardHandler)))
	ctx := context.Background()
	lim := core.PerHour(3)
	first, err := takeID(ctx, g, "k", lim, 1)
	require.NoError(t, err)
	b.failWith(errors.New("down"))
	a := core.Admission{Key: key("k"), Limit: lim, Cost: 1, At: first.At}
	require.NoError(t, g.Refund(ctx, a), "a failed refund is dropped")
	require.Equal(t, guard.Closed, g.Circuit())
	require.NoError(t, g.Refund(ctx, a))
	require.Equal(t, guard.Open, g.Circuit(), "two failed refunds open the circuit")
	require.Equal(t, uint64(2), g.Stats().Failures)
	calls := b.calls.Load()
	require.NoError(t, g.Refund(ctx, a))
	require.Equal(t, calls, b.calls.Load(), "no backend call while the circuit is open")
	// The refund after the cooldown is the probe: it closes the circuit.
	b.failWith(nil)
	clk.Advance(time.Second)
	require.NoError(t, g.Refund(ctx, a))
	require.Equal(t, guard.Closed, g.Circuit())
	r, err := takeID(ctx, b.Store, "k", lim, 0)
	require.NoError(t, err)
	require.Equal(t, int64(3), r.Remaining, "the probe's refund was made")
	// Errors of the call itself are returned.
	require.ErrorIs(t, g.Refund(ctx, core.Admission{Key: key("k"), Limit: lim, Cost: -1}), core.ErrInvalidCost)
	require.Equal(t, []string{"closed>open", "open>half_open", "half_open>closed"}, obs.list())
}

func TestClassify(t *testing.T) {
	cases := map[error]guard.ErrorKind{
		context.DeadlineExceeded:                  guard.KindTimeout,
		fmt.Errorf("x: %w", syscall.ECONNREFUSED): guard.KindConnection,
		io.EOF: guard.KindConnection,
		fmt.Errorf("redisstore: %w", core.ErrClosed):        guard.KindClosed,
		errors.New("CLUSTERDOWN The cluster is down"):       guard.KindBackend,
		fmt.Errorf("wrapped: %w", context.DeadlineExceeded): guard.KindTimeout,
	}
	for err, want := range cases {
		require.Equal(t, want, guard.Classify(err), err.Error())
	}
	for _, k := range []guard.ErrorKind{guard.KindTimeout, guard.KindConnection, guard.KindClosed, guard.KindBackend} {
		require.False(t, strings.HasPrefix(k.String(), "ErrorKind("))
	}
}

// The guard is a core.Store like any other: over a healthy backend it
// passes the conformance suite (groups, refunds and overrides included).
func TestConformance(t *testing.T) {
	limitertest.Run(t, func(t *testing.T, clock func() time.Time) core.Store {
		m, err := memorystore.New(memorystore.WithClock(clock))
		require.NoError(t, err)
		t.Cleanup(func() { m.Close() })
		return newGuard(t, m, guard.WithClock(clock), guard.WithFallback(2))
	})
}
