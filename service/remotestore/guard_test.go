package remotestore_test

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/service/remotestore"
)

// Behind a guard, a stopped ratelimitd is answered by the failure mode
// within the guard's timeout; the breaker opens after its failures, so
// further answers cost no call; when the server returns, one probe closes
// the circuit and decisions come from the server's store again, whose
// state the outage did not touch.
func TestGuardServerStopped(t *testing.T) {
	const timeout = 100 * time.Millisecond
	modes := []struct {
		name    string
		opt     guard.Option
		source  core.Source
		allowed func(i int) bool // the answer to the i-th take while the server is down
	}{
		{"fail open", guard.WithFailOpen(), core.FailedOpen, func(int) bool { return true }},
		{"fail closed", guard.WithFailClosed(time.Second), core.FailedClosed, func(int) bool { return false }},
		// The local limiter of one instance admits the limit (5) afresh.
		{"fallback", guard.WithFallback(1), core.FromFallback, func(i int) bool { return i < 5 }},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			ctx := ctxT(t, 30*time.Second)
			backend := memory(t, nil)
			srv := serve(t, backend, "127.0.0.1:0")
			rs := remotestore.New(dial(t, srv.addr))
			k, l := core.Key{Identity: "outage", Policy: "p"}, core.PerMinute(5)
			// The connection is up before the guard's 100ms bound applies:
			// dialling is not what this test times (on a loaded machine it
			// took longer, and the first take failed open).
			_, err := limitertest.TakeOne(ctx, rs, k, l, 0)
			require.NoError(t, err)
			gs, err := guard.New(rs, m.opt, guard.WithTimeout(timeout),
				guard.WithBreaker(guard.Breaker{Failures: 3, Cooldown: 500 * time.Millisecond}),
				guard.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
			require.NoError(t, err)
			t.Cleanup(func() { gs.Close() })

			r, err := limitertest.TakeOne(ctx, gs, k, l, 1)
			require.NoError(t, err)
			require.Equal(t, core.FromStore, r.Source)
			require.Equal(t, int64(4), r.Remaining)

			srv.stop()
			for i := range 6 {
				start := time.Now()
				r, err := limitertest.TakeOne(ctx, gs, k, l, 1)
				took := time.Since(start)
				require.NoError(t, err)
				require.Equal(t, m.source, r.Source, "take %d", i)
				require.Equal(t, m.allowed(i), r.Allowed, "take %d", i)
				require.Less(t, took, timeout+time.Second, "take %d answered after %s", i, took)
			}
			require.Equal(t, guard.Open, gs.Circuit())
			require.GreaterOrEqual(t, gs.Stats().Failures, uint64(3))
			calls := gs.Stats().BackendCalls
			r, err = limitertest.TakeOne(ctx, gs, k, l, 1)
			require.NoError(t, err)
			require.Equal(t, m.source, r.Source)
			require.Equal(t, calls, gs.Stats().BackendCalls, "an open circuit calls the server")

			serve(t, backend, srv.addr) // the server returns on its address
			require.Eventually(t, func() bool {
				r, err := limitertest.TakeOne(ctx, gs, k, l, 0)
				return err == nil && r.Source == core.FromStore
			}, 10*time.Second, 20*time.Millisecond)
			require.Equal(t, guard.Closed, gs.Circuit())
			r, err = limitertest.TakeOne(ctx, gs, k, l, 1)
			require.NoError(t, err)
			require.Equal(t, core.FromStore, r.Source)
			require.Equal(t, int64(3), r.Remaining, "the server's state survived the outage")
		})
	}
}

// A server that hangs (a stalled network, no error ever) is bounded by the
// guard's timeout: answered by the mode, and back when bytes flow again.
func TestGuardServerStalled(t *testing.T) {
	const timeout = 50 * time.Millisecond
	ctx := ctxT(t, 30*time.Second)
	srv := serve(t, memory(t, nil), "127.0.0.1:0")
	proxy := redistest.NewProxy(t, srv.addr)
	gs, err := guard.New(remotestore.New(dial(t, proxy.Addr)), guard.WithFailClosed(time.Second), guard.WithTimeout(timeout),
		guard.WithBreaker(guard.Breaker{Failures: 2, Cooldown: 50 * time.Millisecond}),
		guard.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	require.NoError(t, err)
	k, l := core.Key{Identity: "stall", Policy: "p"}, core.PerMinute(5)
	r, err := limitertest.TakeOne(ctx, gs, k, l, 1)
	require.NoError(t, err)
	require.Equal(t, core.FromStore, r.Source)

	proxy.Stall()
	for range 4 {
		start := time.Now()
		r, err := limitertest.TakeOne(ctx, gs, k, l, 1)
		require.NoError(t, err)
		require.Equal(t, core.FailedClosed, r.Source)
		require.False(t, r.Allowed)
		require.Less(t, time.Since(start), timeout+time.Second)
	}
	require.Equal(t, guard.Open, gs.Circuit())
	proxy.Resume()
	require.Eventually(t, func() bool {
		r, err := limitertest.TakeOne(ctx, gs, k, l, 0)
		return err == nil && r.Source == core.FromStore
	}, 10*time.Second, 20*time.Millisecond)
	// A call that timed out may still have been decided when its bytes
	// arrived (a timeout does not say that nothing was counted): at most
	// the two calls the circuit let through.
	r, err = limitertest.TakeOne(ctx, gs, k, l, 0)
	require.NoError(t, err)
	require.Equal(t, core.FromStore, r.Source)
	require.GreaterOrEqual(t, r.Remaining, int64(2))
	require.LessOrEqual(t, r.Remaining, int64(4))
}
