package main

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/adapters/grpclimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// attempt is what the server saw of one attempt of a call.
type attempt struct {
	code     codes.Code
	pushback string // grpc-retry-pushback-ms, "" when none
	end      time.Time
}

// recorder is a server interceptor, installed before grpclimit, that records
// every attempt and the pushback grpclimit put in its trailer. The store's
// clock stands still, so the second call is always denied, whatever the
// machine's load; after a denial the recorder moves it past the wait, so the
// retry is always admitted. The client's wait is real time.
type recorder struct {
	mu       sync.Mutex
	attempts []attempt
	now      atomic.Int64 // the store's clock, in Unix nanoseconds
}

func (rec *recorder) clock() time.Time { return time.Unix(0, rec.now.Load()) }

type trailerStream struct {
	grpc.ServerTransportStream
	trailer metadata.MD
}

func (s *trailerStream) SetTrailer(md metadata.MD) error {
	s.trailer = metadata.Join(s.trailer, md)
	return s.ServerTransportStream.SetTrailer(md)
}

func (rec *recorder) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	ts := &trailerStream{ServerTransportStream: grpc.ServerTransportStreamFromContext(ctx)}
	resp, err := h(grpc.NewContextWithServerTransportStream(ctx, ts), req)
	a := attempt{code: status.Code(err), end: time.Now()}
	if p := ts.trailer.Get(grpclimit.MetadataPushback); len(p) == 1 {
		a.pushback = p[0]
	}
	if a.code == codes.ResourceExhausted {
		rec.now.Add(int64(time.Minute))
	}
	rec.mu.Lock()
	rec.attempts = append(rec.attempts, a)
	rec.mu.Unlock()
	return resp, err
}

func (rec *recorder) seen() []attempt {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]attempt(nil), rec.attempts...)
}

// serve starts the example server's configuration (the health service
// limited per client IP by grpclimit.WithMethodLimiter, no default limiter)
// on loopback, with one call per 200ms, and returns its address.
func serve(t *testing.T, rec *recorder) string {
	t.Helper()
	rec.now.Store(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	store, err := memorystore.New(memorystore.WithClock(rec.clock))
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	limiter, err := core.NewLimiter(store, []core.Policy{{Name: "health", Key: keyfunc.IP(), Limit: core.Per(1, 200*time.Millisecond)}})
	require.NoError(t, err)
	opts := []grpclimit.Option{grpclimit.WithMethodLimiter("/grpc.health.v1.Health/", limiter)}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(rec.unary, grpclimit.UnaryServerInterceptor(nil, opts...)))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// TestRetryAfterPushback: with the client's service config, the second call,
// which the server denies, is sent again once the pushback has passed and
// succeeds; the caller sees two successes. Without it the denial reaches the
// caller at once.
func TestRetryAfterPushback(t *testing.T) {
	t.Run("retry", func(t *testing.T) {
		rec := &recorder{}
		conn, err := dial(serve(t, rec), true)
		require.NoError(t, err)
		defer conn.Close()

		var out bytes.Buffer
		start := time.Now()
		run(&out, healthpb.NewHealthClient(conn), 2, "", 5*time.Second)
		elapsed := time.Since(start)
		t.Log("\n" + out.String())
		require.Regexp(t, `(?m)^#1 OK SERVING in `, out.String())
		require.Regexp(t, `(?m)^#2 OK SERVING in `, out.String(), "the denied call was retried and succeeded")

		seen := rec.seen()
		require.Len(t, seen, 3, "two calls, the second in two attempts")
		require.Equal(t, []codes.Code{codes.OK, codes.ResourceExhausted, codes.OK}, []codes.Code{seen[0].code, seen[1].code, seen[2].code})
		pushback, err := strconv.Atoi(seen[1].pushback)
		require.NoError(t, err, "the denial carries grpc-retry-pushback-ms")
		require.GreaterOrEqual(t, pushback, 200, "the wait of a stopped clock")
		require.LessOrEqual(t, pushback, 200+50) // the wait, a 1ms margin, the decision's time
		wait := time.Duration(pushback) * time.Millisecond
		// The client waited the pushback, not its own backoff of 0.5s
		// (0.4s to 0.6s with jitter).
		gap := seen[2].end.Sub(seen[1].end)
		require.GreaterOrEqual(t, gap, wait-5*time.Millisecond, "retried after the pushback")
		require.Less(t, gap, 400*time.Millisecond, "retried after the pushback, not after the backoff")
		require.Less(t, elapsed, 2*time.Second)
	})

	t.Run("no retry", func(t *testing.T) {
		rec := &recorder{}
		conn, err := dial(serve(t, rec), false)
		require.NoError(t, err)
		defer conn.Close()

		var out bytes.Buffer
		run(&out, healthpb.NewHealthClient(conn), 2, "", 5*time.Second)
		require.Regexp(t, `(?m)^#1 OK SERVING in `, out.String())
		require.Regexp(t, `(?m)^#2 ResourceExhausted in `, out.String())
		require.Regexp(t, `(?m)^   trailer grpc-retry-pushback-ms: \d+$`, out.String())
		require.Regexp(t, `(?m)^   RetryInfo     retry_delay=`, out.String())
		require.Len(t, rec.seen(), 2, "the denial was not retried")
	})
}
