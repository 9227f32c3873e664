package grpclimit_test

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/adapters/grpclimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/ratelimitfields"
)

// BenchmarkUnaryServerInterceptor measures the interceptor's cost per call
// by calling it directly with a trivial handler and a context that carries a
// peer and a transport stream (what a server provides), against calling the
// handler alone. Every call is admitted by the memory store, keyed by the
// peer IP.
func BenchmarkUnaryServerInterceptor(b *testing.B) {
	store := newStore(b)
	lim := newLimiter(b, store, "api", core.PerSecond(core.MaxRate), nil)
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 51234}})
	ctx = grpc.NewContextWithServerTransportStream(ctx, &benchStream{})
	info := &grpc.UnaryServerInfo{FullMethod: methodUnary}
	req := wrapperspb.String("hi")
	resp := wrapperspb.String("echo:hi")
	handler := func(context.Context, any) (any, error) { return resp, nil }

	b.Run("none", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := handler(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, bc := range []struct {
		name string
		opts []grpclimit.Option
	}{
		{"sluice", nil},
		{"sluice-no-metadata", []grpclimit.Option{grpclimit.WithHeaders(ratelimitfields.Config{
			Omit: ratelimitfields.Draft | ratelimitfields.XRateLimit | ratelimitfields.RetryAfter | ratelimitfields.State})}},
		{"sluice-skipped", []grpclimit.Option{grpclimit.WithSkipMethods("/sluice.test.Echo/")}},
	} {
		icpt := grpclimit.UnaryServerInterceptor(lim, bc.opts...)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := icpt(ctx, req, info, handler); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchStream is a transport stream that accepts and drops metadata, so the
// benchmark measures the interceptor rather than the transport.
type benchStream struct{}

func (benchStream) Method() string                  { return methodUnary }
func (benchStream) SetHeader(md metadata.MD) error  { return nil }
func (benchStream) SendHeader(md metadata.MD) error { return nil }
func (benchStream) SetTrailer(md metadata.MD) error { return nil }

// BenchmarkUnaryBufconn puts the interceptor's cost next to that of a whole
// in-process call (client, HTTP/2 over an in-memory pipe, server).
func BenchmarkUnaryBufconn(b *testing.B) {
	lim := newLimiter(b, newStore(b), "api", core.PerSecond(core.MaxRate), nil)
	for _, bc := range []struct {
		name string
		opts []grpc.ServerOption
	}{
		{"none", nil},
		{"sluice", []grpc.ServerOption{grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(lim))}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := serve(b, bufconnTransport, bc.opts)
			req, resp := wrapperspb.String("hi"), new(wrapperspb.StringValue)
			b.ReportAllocs()
			for b.Loop() {
				if err := s.conn.Invoke(context.Background(), methodUnary, req, resp); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkStreamServerInterceptor is BenchmarkUnaryServerInterceptor for a
// stream that opens, sends one message and ends: the open decision and the
// metadata on its first message.
func BenchmarkStreamServerInterceptor(b *testing.B) {
	lim := newLimiter(b, newStore(b), "api", core.PerSecond(core.MaxRate), nil)
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 51234}})
	ctx = grpc.NewContextWithServerTransportStream(ctx, &benchStream{})
	info := &grpc.StreamServerInfo{FullMethod: methodBidi, IsClientStream: true, IsServerStream: true}
	ss := benchServerStream{ctx: ctx}
	resp := wrapperspb.String("echo:hi")
	handler := func(_ any, ss grpc.ServerStream) error { return ss.SendMsg(resp) }
	icpt := grpclimit.StreamServerInterceptor(lim)
	b.ReportAllocs()
	for b.Loop() {
		if err := icpt(nil, ss, info, handler); err != nil {
			b.Fatal(err)
		}
	}
}

// benchServerStream is a server stream that drops what it is given.
type benchServerStream struct{ ctx context.Context }

func (s benchServerStream) SetHeader(metadata.MD) error  { return nil }
func (s benchServerStream) SendHeader(metadata.MD) error { return nil }
func (s benchServerStream) SetTrailer(metadata.MD)       {}
func (s benchServerStream) Context() context.Context     { return s.ctx }
func (s benchServerStream) SendMsg(any) error            { return nil }
func (s benchServerStream) RecvMsg(any) error            { return nil }
