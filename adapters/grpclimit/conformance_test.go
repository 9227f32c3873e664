package grpclimit_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/adapters/grpclimit"
	"github.com/sluicehq/sluice/adapters/internal/adaptertest"
	"github.com/sluicehq/sluice/keyfunc"
)

// harness runs the adapter conformance suite against the unary
// interceptor, or with stream set against the stream interceptor (each
// call a stream of one message), installed with the same options. grpc-go
// does not recover handlers: a panic the interceptor does not contain
// takes the test process down.
type harness struct{ stream bool }

// Routers: gRPC has no paths to spell differently.
func (harness) Routers() []string { return nil }

type grpcServer struct {
	s      *server
	stream bool
}

// gone cancels the context of a call that carries x-gone: the client went
// away as the call arrived.
func gone(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if len(metadata.ValueFromIncomingContext(ctx, "x-gone")) > 0 {
		c, cancel := context.WithCancel(ctx)
		cancel()
		ctx = c
	}
	return h(ctx, req)
}

// goneStream is gone for streams.
func goneStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if len(metadata.ValueFromIncomingContext(ss.Context(), "x-gone")) > 0 {
		c, cancel := context.WithCancel(ss.Context())
		cancel()
		ss = contextStream{ss, c}
	}
	return h(srv, ss)
}

// contextStream is a server stream with another context.
type contextStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s contextStream) Context() context.Context { return s.ctx }

// panicOptions are the callbacks that panic, by name.
func panicOption(cb adaptertest.Callback) []grpclimit.Option {
	switch cb {
	case adaptertest.KeyCallback:
		return []grpclimit.Option{grpclimit.WithKey(func(keyfunc.Request) (string, error) { panic("boom") })}
	case adaptertest.SkipCallback:
		return []grpclimit.Option{grpclimit.WithSkip(func(context.Context, string) bool { panic("boom") })}
	case adaptertest.CostCallback:
		return []grpclimit.Option{grpclimit.WithCost(func(context.Context, string, any) int64 { panic("boom") })}
	}
	return nil
}

// incoming is the first value of the call's metadata key.
func incoming(ctx context.Context, key string) string {
	if v := metadata.ValueFromIncomingContext(ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// report tells the client what the handler found: adaptertest.Describe of
// the call's Decision, in the header metadata.
func report(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	d, ok := grpclimit.DecisionFrom(ctx)
	if err := grpc.SetHeader(ctx, metadata.Pairs(strings.ToLower(adaptertest.HeaderDecision), adaptertest.Describe(d, ok))); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

// reportStream is report for streams.
func reportStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	d, ok := grpclimit.DecisionFrom(ss.Context())
	if err := ss.SetHeader(metadata.Pairs(strings.ToLower(adaptertest.HeaderDecision), adaptertest.Describe(d, ok))); err != nil {
		return err
	}
	return h(srv, ss)
}

func (h harness) Start(t *testing.T, s adaptertest.Setup) adaptertest.Server {
	opts := panicOption(s.Panic)
	if s.Logger != nil {
		opts = append(opts, grpclimit.WithLogger(s.Logger))
	}
	if s.OnError != nil {
		opts = append(opts, grpclimit.WithErrorHandler(func(_ context.Context, _ string, err error) (bool, error) {
			if s.OnError(err) {
				return true, nil
			}
			return false, status.Error(codes.Unavailable, adaptertest.Refused)
		}))
	}
	if s.Cost {
		opts = append(opts, grpclimit.WithCost(func(ctx context.Context, _ string, _ any) int64 {
			return adaptertest.CostOf(incoming(ctx, "x-cost"))
		}))
	}
	if s.Skip {
		opts = append(opts, grpclimit.WithSkip(func(ctx context.Context, _ string) bool { return incoming(ctx, "x-skip") != "" }))
	}
	if s.Headers != nil {
		opts = append(opts, grpclimit.WithHeaders(*s.Headers))
	}
	return grpcServer{serve(t, bufconnTransport, []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(gone, grpclimit.UnaryServerInterceptor(s.Limiter, opts...), report),
		grpc.ChainStreamInterceptor(goneStream, grpclimit.StreamServerInterceptor(s.Limiter, opts...), reportStream),
	}), h.stream}
}

// Do makes one call (unary, or a stream of one message) with r.Header as
// metadata, and answers with the header and trailer metadata together and
// the status message as the body.
func (g grpcServer) Do(t *testing.T, r adaptertest.Request) adaptertest.Response {
	ctx := t.Context()
	if r.Gone {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-gone", "1")
	}
	for k, vs := range r.Header {
		for _, v := range vs {
			ctx = metadata.AppendToOutgoingContext(ctx, strings.ToLower(k), v)
		}
	}
	var res result
	if g.stream {
		res = g.s.bidi(t, ctx, methodBidi)
	} else {
		res = g.s.unary(t, ctx, methodUnary)
	}
	st, ok := status.FromError(res.err)
	if !ok {
		t.Fatalf("not a gRPC status: %v", res.err)
	}
	code := http.StatusInternalServerError
	switch st.Code() {
	case codes.OK:
		code = http.StatusOK
	case codes.ResourceExhausted:
		code = http.StatusTooManyRequests
	case codes.Unavailable:
		code = http.StatusServiceUnavailable
	}
	h := http.Header{}
	for _, md := range []metadata.MD{res.header, res.trailer} {
		for k, vs := range md {
			for _, v := range vs {
				h.Add(k, v)
			}
		}
	}
	return adaptertest.Response{Status: code, Header: h, Body: st.Message(), Ran: "unary", RPC: true}
}

func (g grpcServer) Runs() int64 { return g.s.echo.calls.Load() }

// TestConformance runs the behaviour every adapter shares, on unary calls
// and on streams.
func TestConformance(t *testing.T) {
	t.Run("unary", func(t *testing.T) { adaptertest.Run(t, harness{}) })
	t.Run("stream", func(t *testing.T) { adaptertest.Run(t, harness{stream: true}) })
}
