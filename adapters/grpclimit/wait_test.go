package grpclimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/adapters/grpclimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// With WithWait, the client interceptor shapes calls over a real
// connection (bufconn and TCP loopback): 5 calls at 10/s burst 1 all reach
// the server, the last no sooner than 400ms after the first; a call whose
// slot is beyond its deadline fails at once with the usual denial and never
// reaches the server; a call cancelled while it waits ends Canceled.
func TestUnaryClientWait(t *testing.T) {
	for _, tr := range transports {
		t.Run(string(tr), func(t *testing.T) {
			lim := newLimiter(t, newStore(t), "provider", core.PerSecond(10).WithBurst(1), keyfunc.Const("upstream"))
			s := serve(t, tr, nil, grpc.WithUnaryInterceptor(grpclimit.UnaryClientInterceptor(lim, grpclimit.WithWait())))
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			start := time.Now()
			for range 5 {
				require.NoError(t, s.unary(t, ctx, methodUnary).err)
			}
			took := time.Since(start)
			require.GreaterOrEqual(t, took, 380*time.Millisecond, "5 calls at 10/s burst 1 went in %s", took)
			require.Less(t, took, 2*time.Second)
			require.EqualValues(t, 5, s.echo.calls.Load())

			short, cancelShort := context.WithTimeout(t.Context(), 20*time.Millisecond)
			defer cancelShort()
			start = time.Now()
			r := s.unary(t, short, methodUnary)
			require.Equal(t, codes.ResourceExhausted, status.Code(r.err), "%v", r.err)
			require.Less(t, time.Since(start), 15*time.Millisecond, "a wait past the deadline must fail at once")
			require.EqualValues(t, 5, s.echo.calls.Load())

			cctx, cancelNow := context.WithCancel(t.Context())
			time.AfterFunc(20*time.Millisecond, cancelNow)
			r = s.unary(t, cctx, methodUnary)
			require.Equal(t, codes.Canceled, status.Code(r.err), "%v", r.err)
			require.EqualValues(t, 5, s.echo.calls.Load())
		})
	}
}

// Without WithWait the same call is denied at once: the option is what
// makes the interceptor wait.
func TestUnaryClientNoWaitByDefault(t *testing.T) {
	lim := newLimiter(t, newStore(t), "provider", core.PerSecond(10).WithBurst(1), keyfunc.Const("upstream"))
	s := serve(t, bufconnTransport, nil, grpc.WithUnaryInterceptor(grpclimit.UnaryClientInterceptor(lim)))
	require.NoError(t, s.unary(t, t.Context(), methodUnary).err)
	denial(t, s.unary(t, t.Context(), methodUnary).err)
}

// Client stream messages wait too with WithMessageLimit and WithWait.
func TestStreamClientWait(t *testing.T) {
	store := newStore(t)
	open := newLimiter(t, store, "streams", core.PerHour(10), keyfunc.Const("upstream"))
	msgs := newLimiter(t, store, "messages", core.PerSecond(20).WithBurst(1), keyfunc.Const("upstream"))
	s := serve(t, bufconnTransport, nil,
		grpc.WithStreamInterceptor(grpclimit.StreamClientInterceptor(open, grpclimit.WithMessageLimit(msgs), grpclimit.WithWait())))
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	cs, err := s.conn.NewStream(ctx, &bidiDesc, methodBidi)
	require.NoError(t, err)
	start := time.Now()
	for range 4 {
		require.NoError(t, cs.SendMsg(wrapperspb.String("m")))
	}
	require.GreaterOrEqual(t, time.Since(start), 140*time.Millisecond, "4 messages at 20/s burst 1")
	require.NoError(t, cs.CloseSend())
}
