package guard_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

var _ guard.Bounded = (*redisstore.Store)(nil)

// bounded is a real memory store that says it bounds its calls within
// timeout (guard.Bounded), and records the context of each call.
type bounded struct {
	*switchable
	timeout time.Duration
	ctxs    chan context.Context
}

func (b *bounded) Timeout() time.Duration { return b.timeout }

func (b *bounded) Take(ctx context.Context, ops []core.Op, out []core.Result) error {
	b.ctxs <- ctx
	return b.switchable.Take(ctx, ops, out)
}

func (b *bounded) Refund(ctx context.Context, a core.Admission) error {
	b.ctxs <- ctx
	return b.switchable.Refund(ctx, a)
}

// TestBoundedBackendRunsOnTheCallersContext: a backend that bounds its
// calls within the guard's timeout gets the caller's context as it is (no
// context with a timer per call), for a Take of one op, of a group and a
// Refund; a backend whose bound is longer, or that states none, gets one
// bounded by the guard's timeout, as before.
func TestBoundedBackendRunsOnTheCallersContext(t *testing.T) {
	const timeout = time.Second
	for _, tc := range []struct {
		name    string
		timeout time.Duration // 0: not a Bounded backend
		same    bool
	}{
		{"bound equal to the guard's", timeout, true},
		{"bound shorter", timeout / 2, true},
		{"bound longer", 2 * timeout, false},
		{"no bound", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &bounded{switchable: newBackend(t, limitertest.NewClock()), timeout: tc.timeout, ctxs: make(chan context.Context, 4)}
			var backend core.Store = b
			if tc.timeout == 0 {
				backend = &recording{bounded: b}
			}
			g := newGuard(t, backend, guard.WithTimeout(timeout))
			type ctxKey struct{}
			ctx := context.WithValue(context.Background(), ctxKey{}, "caller")
			l := core.PerSecond(10)
			check := func(what string) {
				t.Helper()
				got := <-b.ctxs
				require.Equal(t, "caller", got.Value(ctxKey{}), "%s: the caller's values", what)
				deadline, ok := got.Deadline()
				if tc.same {
					require.True(t, got == ctx, "%s: the caller's context itself", what)
					return
				}
				require.True(t, ok, "%s: a deadline of the guard's", what)
				require.WithinDuration(t, time.Now().Add(timeout), deadline, timeout/2, what)
			}
			r, err := takeID(ctx, g, "a", l, 1)
			require.NoError(t, err)
			check("Take of one op")
			ops := []core.Op{{Key: key("a"), Limit: l, Cost: 1}, {Key: key("b"), Limit: l, Cost: 1}}
			require.NoError(t, g.Take(ctx, ops, make([]core.Result, 2)))
			check("Take of a group")
			require.NoError(t, g.Refund(ctx, core.Admission{Key: key("a"), Limit: l, Cost: 1, At: r.At}))
			check("Refund")
		})
	}
}

// recording hides bounded's Timeout: a backend that states no bound.
type recording struct{ bounded *bounded }

func (r *recording) Take(ctx context.Context, ops []core.Op, out []core.Result) error {
	return r.bounded.Take(ctx, ops, out)
}

func (r *recording) Refund(ctx context.Context, a core.Admission) error {
	return r.bounded.Refund(ctx, a)
}

func (r *recording) Reset(ctx context.Context, k core.Key, l core.Limit) error {
	return r.bounded.Reset(ctx, k, l)
}

func (r *recording) SetOverride(ctx context.Context, k core.Key, o core.Override) error {
	return r.bounded.SetOverride(ctx, k, o)
}

func (r *recording) ClearOverride(ctx context.Context, k core.Key) error {
	return r.bounded.ClearOverride(ctx, k)
}

// TestBoundedRedisStoreTimesOut: over the Redis store with the guard's
// own timeout (the guard then adds no timer of its own), a Redis that
// answers late still costs a decision the timeout and no more: the
// failure mode answers it, and the failure is a timeout.
func TestBoundedRedisStoreTimesOut(t *testing.T) {
	const timeout = 50 * time.Millisecond
	srv := redistest.StartServer(t)
	proxy := newFaultProxy(t, srv.Addr)
	client := redis.NewClient(clientOptions(proxy.Addr, true))
	t.Cleanup(func() { client.Close() })
	for _, pipelined := range []bool{true, false} {
		opts := []redisstore.Option{redisstore.WithTimeout(timeout)}
		if !pipelined {
			opts = append(opts, redisstore.WithPipelining(0, 0))
		}
		rs, err := redisstore.New(client, opts...)
		require.NoError(t, err)
		var obs transitions
		g := newGuard(t, rs, guard.WithTimeout(timeout), guard.WithFailClosed(0), guard.WithObserver(&obs),
			guard.WithBreaker(guard.Breaker{Failures: 1000}), guard.WithLogger(slog.New(slog.DiscardHandler)))
		l := core.PerSecond(1000)
		// The first calls connect and load the code: the store answers
		// once they are made.
		require.Eventually(t, func() bool {
			r, err := takeID(context.Background(), g, "k", l, 1)
			return err == nil && r.Source == core.FromStore
		}, 5*time.Second, time.Millisecond, "pipelined %v", pipelined)
		before := obs.timeouts()
		proxy.SetLatency(10 * timeout)
		for range 3 {
			start := time.Now()
			r, err := takeID(context.Background(), g, "k", l, 1)
			took := time.Since(start)
			require.NoError(t, err)
			require.Equal(t, core.FailedClosed, r.Source, "pipelined %v", pipelined)
			require.GreaterOrEqual(t, took, timeout, "pipelined %v", pipelined)
			require.Less(t, took, 10*timeout, "pipelined %v: bounded by the store's own timeout, not the reply's latency", pipelined)
		}
		require.Equal(t, before+3, obs.timeouts(), "pipelined %v: the failures are timeouts", pipelined)
		proxy.SetLatency(0)
		require.NoError(t, rs.Close())
	}
}

// timeouts counts the timeouts seen.
func (o *transitions) timeouts() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.errs[guard.KindTimeout]
}
