package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/adapters/grpclimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// TestFailingStore: a store that fails never shows its error to the client.
// By default calls fail open (and the error is logged); an error handler
// decides otherwise.
func TestFailingStore(t *testing.T) {
	custom := status.Error(codes.Internal, "limiter says no")
	tests := []struct {
		name     string
		handler  func(context.Context, string, error) (bool, error)
		wantCode codes.Code
		wantMsg  string
		logged   bool
	}{
		{name: "default fails open", wantCode: codes.OK, logged: true},
		{name: "FailClosed", handler: grpclimit.FailClosed, wantCode: codes.Unavailable, wantMsg: "rate limit unavailable"},
		{name: "handler lets through", handler: func(context.Context, string, error) (bool, error) { return true, nil }, wantCode: codes.OK},
		{name: "refusing with nil is Unavailable", handler: func(context.Context, string, error) (bool, error) { return false, nil }, wantCode: codes.Unavailable, wantMsg: "rate limit unavailable"},
		{name: "raw error is replaced", handler: func(_ context.Context, _ string, err error) (bool, error) { return false, err }, wantCode: codes.Unavailable, wantMsg: "rate limit unavailable"},
		{name: "wrapped status is replaced", handler: func(_ context.Context, _ string, err error) (bool, error) {
			return false, errors.Join(custom, err)
		}, wantCode: codes.Unavailable, wantMsg: "rate limit unavailable"},
		{name: "status passes", handler: func(context.Context, string, error) (bool, error) { return false, custom }, wantCode: codes.Internal, wantMsg: "limiter says no"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			store := &failingStore{Store: newStore(t)}
			var logs syncBuffer
			var seen []error
			var mu sync.Mutex
			opts := []grpclimit.Option{grpclimit.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))), grpclimit.WithMessageLimit(newLimiter(t, store, "messages", core.PerHour(10), nil))}
			if tc.handler != nil {
				opts = append(opts, grpclimit.WithErrorHandler(func(ctx context.Context, m string, err error) (bool, error) {
					mu.Lock()
					seen = append(seen, err)
					mu.Unlock()
					return tc.handler(ctx, m, err)
				}))
			}
			lim := newLimiter(t, store, "api", core.PerHour(10), nil)
			s := serve(t, bufconnTransport, []grpc.ServerOption{
				grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(lim, opts...)),
				grpc.StreamInterceptor(grpclimit.StreamServerInterceptor(lim, opts...)),
			})

			r := s.unary(t, t.Context(), methodUnary)
			require.Equal(t, tc.wantCode, status.Code(r.err), "%v", r.err)
			requireNoRateLimitMetadata(t, r.header)
			requireNoRateLimitMetadata(t, r.trailer)
			if r.err != nil {
				require.Equal(t, tc.wantMsg, status.Convert(r.err).Message())
				require.NotContains(t, r.err.Error(), "hunter2")
				require.Empty(t, status.Convert(r.err).Details())
			}

			// A stream: checked at open and per message.
			cs, err := s.conn.NewStream(t.Context(), &bidiDesc, methodBidi)
			require.NoError(t, err)
			if err := cs.SendMsg(wrapperspb.String("m")); err != nil {
				require.ErrorIs(t, err, io.EOF, "a stream refused at open ends; its status comes from RecvMsg")
			}
			out := new(wrapperspb.StringValue)
			err = cs.RecvMsg(out)
			if tc.wantCode == codes.OK {
				require.NoError(t, err)
				require.Equal(t, "echo:m", out.GetValue())
				require.NoError(t, cs.CloseSend())
				require.ErrorIs(t, cs.RecvMsg(out), io.EOF)
			} else {
				require.Equal(t, tc.wantCode, status.Code(err))
				require.NotContains(t, err.Error(), "hunter2")
			}
			requireNoRateLimitMetadata(t, cs.Trailer())

			require.Positive(t, store.calls.Load())
			if tc.logged {
				require.Contains(t, logs.String(), "sluice: request not rate limited")
				require.Contains(t, logs.String(), "method=/sluice.test.Echo/Unary")
				require.Contains(t, logs.String(), "hunter2", "the operator sees the error")
			} else {
				require.Empty(t, logs.String())
				mu.Lock()
				require.NotEmpty(t, seen)
				require.ErrorIs(t, seen[0], errSecret, "the handler gets the real error")
				mu.Unlock()
			}
		})
	}
}

// TestNoPeer: a call whose context has no usable peer has no client IP: it
// fails open by default (the error handler can refuse it), without a panic.
func TestNoPeer(t *testing.T) {
	lim := newLimiter(t, newStore(t), "api", core.PerHour(10), nil)
	info := &grpc.UnaryServerInfo{FullMethod: methodUnary}
	contexts := map[string]context.Context{
		"no peer":       context.Background(),
		"nil peer addr": peer.NewContext(context.Background(), &peer.Peer{}),
		"typed nil":     peer.NewContext(context.Background(), &peer.Peer{Addr: (*net.TCPAddr)(nil)}),
		"unix peer":     peer.NewContext(context.Background(), &peer.Peer{Addr: &net.UnixAddr{Name: "@", Net: "unix"}}),
		"not an ip":     peer.NewContext(context.Background(), &peer.Peer{Addr: fakeAddr("bufconn")}),
	}
	for name, ctx := range contexts {
		t.Run(name, func(t *testing.T) {
			var logs syncBuffer
			sts := &fakeTransportStream{method: methodUnary}
			ctx := grpc.NewContextWithServerTransportStream(ctx, sts)
			called := false
			h := func(context.Context, any) (any, error) { called = true; return "ok", nil }

			open := grpclimit.UnaryServerInterceptor(lim, grpclimit.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			resp, err := open(ctx, nil, info, h)
			require.NoError(t, err)
			require.Equal(t, "ok", resp)
			require.True(t, called)
			require.Contains(t, logs.String(), "no client IP")
			requireNoRateLimitMetadata(t, sts.header)

			closed := grpclimit.UnaryServerInterceptor(lim, grpclimit.WithErrorHandler(func(_ context.Context, _ string, err error) (bool, error) {
				require.ErrorIs(t, err, keyfunc.ErrNoKey)
				return grpclimit.FailClosed(nil, "", err)
			}))
			called = false
			_, err = closed(ctx, nil, info, h)
			require.Equal(t, codes.Unavailable, status.Code(err))
			require.False(t, called)
		})
	}
}

type fakeAddr string

func (a fakeAddr) Network() string { return "fake" }
func (a fakeAddr) String() string  { return string(a) }

// TestForwardedMetadata: behind a trusted proxy the client IP comes from
// x-forwarded-for, every value of a repeated key in order, from the right;
// huge or garbage values fall back to the peer. Each call still succeeds
// with well-formed metadata.
func TestForwardedMetadata(t *testing.T) {
	var mu sync.Mutex
	var keys []string
	ip := ipKey(t, keyfunc.TrustProxies("10.0.0.0/8"))
	recordKey := func(r keyfunc.Request) (string, error) {
		k, err := ip(r)
		mu.Lock()
		keys = append(keys, k)
		mu.Unlock()
		return k, err
	}
	lim := newLimiter(t, newStore(t), "api", core.PerHour(1000), recordKey)
	proxy := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 2), Port: 5555}
	s := serveAs(t, bufconnTransport, proxy, []grpc.ServerOption{grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(lim))})

	huge := strings.Repeat("10.0.0.3, ", 10_000) // 100 kB of trusted hops
	garbage := strings.Repeat("x", 200_000)
	tests := []struct {
		name string
		md   []string
		want string
	}{
		{"none", nil, "10.0.0.2"},
		{"one", []string{"x-forwarded-for", "203.0.113.9"}, "203.0.113.9"},
		{"rightmost untrusted", []string{"x-forwarded-for", "198.51.100.1, 203.0.113.9, 10.0.0.5"}, "203.0.113.9"},
		{"repeated key, last line wins", []string{"x-forwarded-for", "198.51.100.1", "x-forwarded-for", "203.0.113.9"}, "203.0.113.9"},
		{"repeated key, walked across lines", []string{"x-forwarded-for", "203.0.113.9", "x-forwarded-for", "10.0.0.5, 10.0.0.6"}, "203.0.113.9"},
		{"mixed-case name", []string{"X-Forwarded-For", "203.0.113.10"}, "203.0.113.10"},
		{"huge list falls back to the peer", []string{"x-forwarded-for", huge}, "10.0.0.2"},
		{"huge garbage falls back to the peer", []string{"x-forwarded-for", garbage}, "10.0.0.2"},
		{"huge unrelated metadata", []string{"x-junk", garbage, "x-forwarded-for", "203.0.113.11"}, "203.0.113.11"},
		{"garbage entry falls back", []string{"x-forwarded-for", "203.0.113.9, not-an-ip"}, "10.0.0.2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			if tc.md != nil {
				ctx = metadata.AppendToOutgoingContext(ctx, tc.md...)
			}
			r := s.unary(t, ctx, methodUnary)
			require.NoError(t, r.err)
			require.Len(t, r.header.Get("x-ratelimit-remaining"), 1)
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, tc.want, keys[len(keys)-1])
		})
	}
}

// TestRepeatedHeaderKey: keyfunc.Header takes the first value of a repeated
// metadata key.
func TestRepeatedHeaderKey(t *testing.T) {
	lim := newLimiter(t, newStore(t), "tenant", core.PerHour(1), keyfunc.Header("X-Tenant"))
	s := serve(t, bufconnTransport, []grpc.ServerOption{grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(lim))})
	ab := metadata.AppendToOutgoingContext(t.Context(), "x-tenant", "a", "x-tenant", "b")
	require.NoError(t, s.unary(t, ab, methodUnary).err)
	a := metadata.AppendToOutgoingContext(t.Context(), "x-tenant", "a")
	require.Equal(t, codes.ResourceExhausted, status.Code(s.unary(t, a, methodUnary).err), "counted under the first value")
	b := metadata.AppendToOutgoingContext(t.Context(), "x-tenant", "b")
	require.NoError(t, s.unary(t, b, methodUnary).err)
}

// TestRequestView: the keyfunc.Request of a server call.
func TestRequestView(t *testing.T) {
	for _, a := range []net.Addr{
		&net.TCPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 443},
		&net.TCPAddr{IP: net.ParseIP("203.0.113.7").To4(), Port: 1},
		&net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 8080},
		&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 80, Zone: "eth0"},
		&net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.1"), Port: 9},
		&net.TCPAddr{IP: net.IP{1, 2, 3}, Port: 9}, // invalid length
		&net.TCPAddr{Port: 9},
		&net.UnixAddr{Name: "/run/app.sock", Net: "unix"},
	} {
		ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: a})
		require.Equal(t, a.String(), grpclimit.Request(ctx, methodUnary).RemoteAddr(), "%#v", a)
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.MD{"x-a": {"1", "2"}})
	r := grpclimit.Request(ctx, methodUnary)
	require.Equal(t, "POST", r.Method())
	require.Equal(t, methodUnary, r.Route())
	require.Equal(t, methodUnary, r.Path())
	require.Equal(t, "1", r.Header("X-A"))
	require.Equal(t, []string{"1", "2"}, r.HeaderValues("x-a"))
	require.Nil(t, r.HeaderValues("x-b"))
	require.Equal(t, "", r.Query("a"))
	require.Equal(t, "", r.RemoteAddr())
	require.Equal(t, ctx, r.Context())
}
