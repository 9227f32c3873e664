package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/adapters/grpclimit"
	"github.com/sluicehq/sluice/adapters/internal/adaptertest"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/ratelimitfields"
)

// The test service, registered by hand (no generated code): two unary
// methods and a bidirectional echo stream of wrapperspb.StringValue.
const (
	echoService = "sluice.test.Echo"
	methodUnary = "/sluice.test.Echo/Unary"
	methodOther = "/sluice.test.Echo/Other"
	methodBidi  = "/sluice.test.Echo/Bidi"
)

var bidiDesc = grpc.StreamDesc{StreamName: "Bidi", ServerStreams: true, ClientStreams: true}

// echo is the test server. It records what its handlers saw.
type echo struct {
	calls      atomic.Int64 // handler invocations, all methods
	fail       atomic.Pointer[error]
	sendHeader atomic.Bool // handlers call grpc.SendHeader first
	mu         sync.Mutex
	decisions  []core.Decision // DecisionFrom in handlers
}

func (e *echo) record(ctx context.Context) {
	e.calls.Add(1)
	if d, ok := grpclimit.DecisionFrom(ctx); ok {
		e.mu.Lock()
		e.decisions = append(e.decisions, *d)
		e.mu.Unlock()
	}
}

func (e *echo) last(t *testing.T) core.Decision {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	require.NotEmpty(t, e.decisions, "no handler saw a Decision")
	return e.decisions[len(e.decisions)-1]
}

func (e *echo) decisionSeen() (core.Decision, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.decisions) == 0 {
		return core.Decision{}, false
	}
	return e.decisions[len(e.decisions)-1], true
}

func unaryMethod(name string) grpc.MethodDesc {
	full := "/" + echoService + "/" + name
	return grpc.MethodDesc{MethodName: name, Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, req any) (any, error) {
			e := srv.(*echo)
			e.record(ctx)
			if e.sendHeader.Load() {
				if err := grpc.SendHeader(ctx, metadata.Pairs("x-app", "1")); err != nil {
					return nil, err
				}
			}
			if err := e.fail.Load(); err != nil {
				return nil, *err
			}
			return wrapperspb.String("echo:" + req.(*wrapperspb.StringValue).GetValue()), nil
		}
		if icpt == nil {
			return h(ctx, in)
		}
		return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: full}, h)
	}}
}

var echoDesc = grpc.ServiceDesc{
	ServiceName: echoService,
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{unaryMethod("Unary"), unaryMethod("Other")},
	Streams: []grpc.StreamDesc{{StreamName: "Bidi", ServerStreams: true, ClientStreams: true,
		Handler: func(srv any, ss grpc.ServerStream) error {
			e := srv.(*echo)
			e.record(ss.Context())
			if e.sendHeader.Load() {
				if err := grpc.SendHeader(ss.Context(), metadata.Pairs("x-app", "1")); err != nil {
					return err
				}
			}
			if err := e.fail.Load(); err != nil {
				return *err
			}
			for {
				in := new(wrapperspb.StringValue)
				if err := ss.RecvMsg(in); err == io.EOF {
					return nil
				} else if err != nil {
					return err
				}
				if err := ss.SendMsg(wrapperspb.String("echo:" + in.GetValue())); err != nil {
					return err
				}
			}
		}}},
}

// fakeAddrListener gives every accepted connection a chosen remote address,
// so that in-process (bufconn) servers see an IP peer.
type fakeAddrListener struct {
	net.Listener
	remote net.Addr
}

type fakeAddrConn struct {
	net.Conn
	remote net.Addr
}

func (c fakeAddrConn) RemoteAddr() net.Addr { return c.remote }

func (l fakeAddrListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return fakeAddrConn{c, l.remote}, nil
}

type transport string

const (
	bufconnTransport transport = "bufconn"
	tcpTransport     transport = "tcp"
)

var transports = []transport{bufconnTransport, tcpTransport}

// bufconnPeer is the peer address in-process servers see.
var bufconnPeer = &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 40000}

type server struct {
	echo *echo
	conn *grpc.ClientConn
	addr string
}

// serve starts a server with the echo and health services on tr and returns
// a client connection to it; dial options are added to the client.
func serve(t testing.TB, tr transport, srvOpts []grpc.ServerOption, dialOpts ...grpc.DialOption) *server {
	t.Helper()
	return serveAs(t, tr, bufconnPeer, srvOpts, dialOpts...)
}

func serveAs(t testing.TB, tr transport, peerAddr net.Addr, srvOpts []grpc.ServerOption, dialOpts ...grpc.DialOption) *server {
	t.Helper()
	s := &server{echo: &echo{}}
	gs := grpc.NewServer(srvOpts...)
	gs.RegisterService(&echoDesc, s.echo)
	healthpb.RegisterHealthServer(gs, health.NewServer())

	var lis net.Listener
	target := "passthrough:///bufnet"
	switch tr {
	case bufconnTransport:
		bl := bufconn.Listen(1 << 20)
		lis = fakeAddrListener{bl, peerAddr}
		dialOpts = append(dialOpts, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return bl.DialContext(ctx)
		}))
	case tcpTransport:
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		lis = l
		target = "passthrough:///" + l.Addr().String()
	}
	s.addr = lis.Addr().String()
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(lis) }()
	dialOpts = append(dialOpts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	conn, err := grpc.NewClient(target, dialOpts...)
	require.NoError(t, err)
	s.conn = conn
	t.Cleanup(func() {
		_ = conn.Close()
		gs.Stop()
		<-done
	})
	return s
}

// result is what a client saw of one call.
type result struct {
	resp    *wrapperspb.StringValue
	err     error
	header  metadata.MD
	trailer metadata.MD
}

func (s *server) unary(t testing.TB, ctx context.Context, method string, opts ...grpc.CallOption) result {
	t.Helper()
	var r result
	r.resp = new(wrapperspb.StringValue)
	opts = append(opts, grpc.Header(&r.header), grpc.Trailer(&r.trailer))
	r.err = s.conn.Invoke(ctx, method, wrapperspb.String("hi"), r.resp, opts...)
	return r
}

// bidi opens a stream of method, sends one message and reads to its end:
// what a client sees of a stream of one message, as unary sees a call.
func (s *server) bidi(t testing.TB, ctx context.Context, method string) result {
	t.Helper()
	var r result
	cs, err := s.conn.NewStream(ctx, &bidiDesc, method)
	require.NoError(t, err)
	if err := cs.SendMsg(wrapperspb.String("hi")); err != nil && err != io.EOF {
		r.err = err
	}
	_ = cs.CloseSend()
	for r.err == nil {
		out := new(wrapperspb.StringValue)
		if err := cs.RecvMsg(out); err != nil {
			if err != io.EOF {
				r.err = err
			}
			break
		}
		r.resp = out
	}
	r.header, _ = cs.Header()
	r.trailer = cs.Trailer()
	return r
}

// health calls grpc.health.v1.Health/Check for the whole server.
func (s *server) health(t testing.TB, ctx context.Context) result {
	t.Helper()
	var r result
	_, r.err = healthpb.NewHealthClient(s.conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&r.header), grpc.Trailer(&r.trailer))
	return r
}

func newStore(t testing.TB) *memorystore.Store {
	t.Helper()
	s, err := memorystore.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func ipKey(t testing.TB, opts ...keyfunc.IPOption) keyfunc.Func {
	t.Helper()
	f := keyfunc.IP(opts...)
	return f
}

func newLimiter(t testing.TB, s core.Store, name string, l core.Limit, key keyfunc.Func, opts ...core.LimiterOption) *core.Limiter {
	t.Helper()
	if key == nil {
		key = ipKey(t)
	}
	lim, err := core.NewLimiter(s, []core.Policy{{Name: name, Key: key, Limit: l}}, opts...)
	require.NoError(t, err)
	return lim
}

// deltaHeaders formats X-RateLimit-Reset in delta seconds, so that the
// metadata of a Decision does not depend on the instant it was formatted.
var deltaHeaders = ratelimitfields.Config{Reset: ratelimitfields.ResetDelta}

// rateLimitKeys are every metadata key the interceptors may set.
var rateLimitKeys = []string{
	grpclimit.MetadataRateLimitPolicy, grpclimit.MetadataRateLimit, grpclimit.MetadataLimit,
	grpclimit.MetadataRemaining, grpclimit.MetadataReset, grpclimit.MetadataState,
	grpclimit.MetadataRetryAfter, grpclimit.MetadataPushback,
}

// requireFields checks that md holds exactly the fields f (under lower-case
// keys, one value each), plus the extra pairs, and no other rate-limit key.
func requireFields(t *testing.T, md metadata.MD, f ratelimitfields.Fields, extra ...string) {
	t.Helper()
	want := map[string]string{}
	for i := range f.N {
		want[strings.ToLower(f.Field[i].String())] = f.Value[i]
	}
	for i := 0; i+1 < len(extra); i += 2 {
		want[extra[i]] = extra[i+1]
	}
	got := map[string]string{}
	for _, k := range rateLimitKeys {
		if v := md.Get(k); v != nil {
			require.Len(t, v, 1, "metadata %s has %d values", k, len(v))
			got[k] = v[0]
		}
	}
	require.Equal(t, want, got)
}

func requireNoRateLimitMetadata(t *testing.T, md metadata.MD) {
	t.Helper()
	for _, k := range rateLimitKeys {
		require.Nil(t, md.Get(k), "unexpected metadata %s", k)
	}
}

// details decodes the details of a ResourceExhausted status.
type details struct {
	st    *status.Status
	retry *errdetails.RetryInfo
	quota *errdetails.QuotaFailure
	info  *errdetails.ErrorInfo
}

func denial(t *testing.T, err error) details {
	t.Helper()
	st, ok := status.FromError(err)
	require.True(t, ok, "not a status: %v", err)
	require.Equal(t, "ResourceExhausted", st.Code().String(), "status: %v", st)
	var d details
	d.st = st
	for _, x := range st.Details() {
		switch x := x.(type) {
		case *errdetails.RetryInfo:
			require.Nil(t, d.retry, "two RetryInfo")
			d.retry = x
		case *errdetails.QuotaFailure:
			require.Nil(t, d.quota, "two QuotaFailure")
			d.quota = x
		case *errdetails.ErrorInfo:
			require.Nil(t, d.info, "two ErrorInfo")
			d.info = x
		case error:
			t.Fatalf("undecodable detail: %v", x)
		}
	}
	require.NotNil(t, d.quota, "no QuotaFailure")
	require.NotNil(t, d.info, "no ErrorInfo")
	return d
}

// failingStore is a memory store whose backend is down: every Take and
// Reset fails.
type failingStore struct {
	core.Store
	calls atomic.Int64
}

var errSecret = errors.New("dial tcp 10.9.8.7:6379: connect: connection refused (password=hunter2)")

func (s *failingStore) Take(context.Context, []core.Op, []core.Result) error {
	s.calls.Add(1)
	return errSecret
}
func (s *failingStore) Reset(context.Context, core.Key, core.Limit) error { return errSecret }

// syncBuffer is a goroutine-safe log sink.
type syncBuffer = adaptertest.SyncBuffer

// deniedRecorder is a WithDeniedHandler that keeps the Decisions it saw
// (DecisionFrom its context) and returns the default error.
type deniedRecorder struct {
	mu sync.Mutex
	ds []core.Decision
}

func (r *deniedRecorder) handler(ctx context.Context, _ string) error {
	d, ok := grpclimit.DecisionFrom(ctx)
	if !ok {
		return errors.New("the denied handler's context has no Decision")
	}
	r.mu.Lock()
	r.ds = append(r.ds, *d)
	r.mu.Unlock()
	return grpclimit.DeniedError(d)
}

func (r *deniedRecorder) last(t *testing.T) core.Decision {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.NotEmpty(t, r.ds)
	return r.ds[len(r.ds)-1]
}

// fakeTransportStream stands in for the server transport stream of a call
// that is intercepted directly (no server): grpc.SetHeader and SetTrailer
// record into it.
type fakeTransportStream struct {
	method          string
	header, trailer metadata.MD
	sent            bool
}

func (s *fakeTransportStream) Method() string { return s.method }
func (s *fakeTransportStream) SetHeader(md metadata.MD) error {
	if s.sent {
		return errors.New("header already sent")
	}
	s.header = metadata.Join(s.header, md)
	return nil
}
func (s *fakeTransportStream) SendHeader(md metadata.MD) error {
	if err := s.SetHeader(md); err != nil {
		return err
	}
	s.sent = true
	return nil
}
func (s *fakeTransportStream) SetTrailer(md metadata.MD) error {
	s.trailer = metadata.Join(s.trailer, md)
	return nil
}

// within waits at most d for cond.
func within(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, d, 5*time.Millisecond)
}
