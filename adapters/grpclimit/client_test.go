package grpclimit_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/adapters/grpclimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// TestUnaryClientDirect: the client interceptor decides before the invoker,
// keyed here by outgoing metadata; a denial never reaches the invoker and
// fills the grpc.Trailer option like a server's denial.
func TestUnaryClientDirect(t *testing.T) {
	rec := &deniedRecorder{}
	lim := newLimiter(t, newStore(t), "provider", core.PerHour(2), keyfunc.Header("X-Tenant"))
	icpt := grpclimit.UnaryClientInterceptor(lim, grpclimit.WithHeaders(deltaHeaders), grpclimit.WithDeniedHandler(rec.handler),
		grpclimit.WithLogger(slog.New(slog.DiscardHandler)))
	invoked := 0
	invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		invoked++
		return nil
	}
	tenantA := metadata.AppendToOutgoingContext(t.Context(), "x-tenant", "a")
	for range 2 {
		require.NoError(t, icpt(tenantA, methodUnary, wrapperspb.String("x"), new(wrapperspb.StringValue), nil, invoker))
	}
	var trailer metadata.MD
	err := icpt(tenantA, methodUnary, wrapperspb.String("x"), new(wrapperspb.StringValue), nil, invoker, grpc.Trailer(&trailer))
	require.Equal(t, 2, invoked, "a denied call never reaches the invoker")
	det := denial(t, err)
	d := rec.last(t)
	requireWait(t, det.retry.GetRetryDelay().AsDuration(), d.Bound().RetryAfter)
	require.Equal(t, "policy:provider", det.quota.GetViolations()[0].GetSubject())
	requireFields(t, trailer, deltaHeaders.Format(&d, time.Time{}), grpclimit.MetadataPushback, pushbackIn(t, trailer, d.Bound().RetryAfter))

	// Another tenant has its own quota; a call without the metadata has no
	// key and fails open.
	tenantB := metadata.AppendToOutgoingContext(t.Context(), "x-tenant", "b")
	require.NoError(t, icpt(tenantB, methodUnary, nil, nil, nil, invoker))
	require.NoError(t, icpt(t.Context(), methodUnary, nil, nil, nil, invoker))
	require.Equal(t, 4, invoked)
}

// TestUnaryClientConn: the same over a real connection; the server never
// sees the denied call.
func TestUnaryClientConn(t *testing.T) {
	for _, tr := range transports {
		t.Run(string(tr), func(t *testing.T) {
			lim := newLimiter(t, newStore(t), "provider", core.PerHour(2), keyfunc.Const("upstream"))
			s := serve(t, tr, nil, grpc.WithUnaryInterceptor(grpclimit.UnaryClientInterceptor(lim)))
			for range 2 {
				require.NoError(t, s.unary(t, t.Context(), methodUnary).err)
			}
			r := s.unary(t, t.Context(), methodUnary)
			denial(t, r.err)
			require.Equal(t, []string{"throttled"}, r.trailer.Get("x-ratelimit-state"))
			require.EqualValues(t, 2, s.echo.calls.Load())
		})
	}
}

// TestStreamClient: streams are decided before they open, and with
// WithMessageLimit every message before it is sent; a denied message leaves
// the stream open.
func TestStreamClient(t *testing.T) {
	store := newStore(t)
	open := newLimiter(t, store, "streams", core.PerHour(1), keyfunc.Const("upstream"))
	msgs := newLimiter(t, store, "messages", core.PerHour(2), keyfunc.Const("upstream"))
	s := serve(t, bufconnTransport, nil,
		grpc.WithStreamInterceptor(grpclimit.StreamClientInterceptor(open, grpclimit.WithMessageLimit(msgs))))

	cs, err := s.conn.NewStream(t.Context(), &bidiDesc, methodBidi)
	require.NoError(t, err)
	require.NoError(t, cs.SendMsg(wrapperspb.String("1")))
	require.NoError(t, cs.SendMsg(wrapperspb.String("2")))
	det := denial(t, cs.SendMsg(wrapperspb.String("3")))
	require.Equal(t, "messages", det.info.GetMetadata()["policy"])
	require.NoError(t, cs.CloseSend(), "the stream is still usable")
	var got []string
	for {
		out := new(wrapperspb.StringValue)
		if err := cs.RecvMsg(out); err != nil {
			require.ErrorIs(t, err, io.EOF)
			break
		}
		got = append(got, out.GetValue())
	}
	require.Equal(t, []string{"echo:1", "echo:2"}, got, "the denied message was not sent")

	_, err = s.conn.NewStream(t.Context(), &bidiDesc, methodBidi)
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	require.EqualValues(t, 1, s.echo.calls.Load(), "the denied stream was never opened")
}

func TestStreamClientDirect(t *testing.T) {
	lim := newLimiter(t, newStore(t), "streams", core.PerHour(1), keyfunc.Route())
	icpt := grpclimit.StreamClientInterceptor(lim)
	opened := 0
	streamer := func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
		opened++
		return nil, nil
	}
	_, err := icpt(t.Context(), &bidiDesc, nil, methodBidi, streamer)
	require.NoError(t, err)
	_, err = icpt(t.Context(), &bidiDesc, nil, methodBidi, streamer)
	denial(t, err)
	require.Equal(t, 1, opened)
}

// WithSkip exempts outgoing calls as it exempts incoming ones: a skipped
// unary call or stream is neither decided nor counted, on a limit of one.
func TestClientSkip(t *testing.T) {
	lim := newLimiter(t, newStore(t), "provider", core.PerHour(1), keyfunc.Const("upstream"))
	skip := grpclimit.WithSkip(func(ctx context.Context, _ string) bool {
		md, _ := metadata.FromOutgoingContext(ctx)
		return len(md.Get("x-skip")) > 0
	})
	unary := grpclimit.UnaryClientInterceptor(lim, skip)
	stream := grpclimit.StreamClientInterceptor(lim, skip)
	invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	streamer := func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
		return nil, nil
	}
	skipped := metadata.AppendToOutgoingContext(t.Context(), "x-skip", "1")
	for range 3 {
		require.NoError(t, unary(skipped, methodUnary, nil, nil, nil, invoker))
		_, err := stream(skipped, &bidiDesc, nil, methodBidi, streamer)
		require.NoError(t, err)
	}
	require.NoError(t, unary(t.Context(), methodUnary, nil, nil, nil, invoker), "the skipped calls were not counted")
	denial(t, unary(t.Context(), methodUnary, nil, nil, nil, invoker))
}
