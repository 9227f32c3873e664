package attack_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/gofiber/fiber/v2"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/adapters/echolimit"
	"github.com/sluicehq/sluice/adapters/fiberlimit"
	"github.com/sluicehq/sluice/adapters/ginlimit"
	"github.com/sluicehq/sluice/adapters/grpclimit"
	"github.com/sluicehq/sluice/adapters/httplimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/keyfunc"
)

// grpcService is the test service: one unary method per route name, each
// taking and returning a wrapperspb.StringValue.
const grpcService = "sluice.attack.Svc"

// ---- requests and clients ----

// request is one request of an attack, in adapter-neutral terms. For the
// HTTP adapters path is the request target sent verbatim on the wire; for
// gRPC it is the full method name.
type request struct {
	method string // GET by default; gRPC ignores it
	path   string
	header map[string]string
}

// A client sends requests to one server over its own connection, so that
// requests of one client reuse a connection (and the framework's buffers).
type client interface {
	// do sends r and returns the status: the HTTP status, or for gRPC
	// 200 (OK), 429 (ResourceExhausted), 503 (Unavailable), 404
	// (Unimplemented) or 500.
	do(ctx context.Context, r request) (int, error)
	close()
}

// ---- servers ----

// spec says how to build the server of one attack.
type spec struct {
	limiter *core.Limiter
	// routes are the route names served ("login" is "/login" over HTTP and
	// "/sluice.attack.Svc/login" over gRPC), for GET and POST.
	routes []string
	// cost reads the cost of a request from its X-Cost header.
	cost bool
	// refuse installs an error handler that refuses undecided requests
	// (503, or codes.Unavailable) instead of letting them through.
	refuse bool
	// logger receives the adapter's log lines (default: discarded).
	logger *slog.Logger
}

// server is a running app behind one adapter's middleware.
type server struct {
	runs      map[string]*atomic.Int64 // handler runs per route name
	newClient func() client
	// disconnect sends r and drops the connection (or cancels the call)
	// before the answer, as a client that gives up at once.
	disconnect func(r request)
	// stop shuts the server down and waits for every handler to return,
	// so runs are final afterwards. It is safe to call more than once.
	stop func()
}

func (s *server) run(route string) int64 { return s.runs[route].Load() }

// adapter builds servers of one framework.
type adapter struct {
	name string
	grpc bool
	// path returns the path of a route name: "/login", or the gRPC full
	// method "/sluice.attack.Svc/login".
	path  func(route string) string
	start func(t *testing.T, s spec) *server
}

func httpPath(route string) string { return "/" + route }
func grpcPath(route string) string { return "/" + grpcService + "/" + route }

var adapters = []adapter{
	{name: "nethttp", path: httpPath, start: startNetHTTP},
	{name: "gin", path: httpPath, start: startGin},
	{name: "echo", path: httpPath, start: startEcho},
	{name: "fiber", path: httpPath, start: startFiber},
	{name: "grpc", grpc: true, path: grpcPath, start: func(t *testing.T, s spec) *server { return startGRPC(t, s, false) }},
	{name: "grpc-stream", grpc: true, path: grpcPath, start: func(t *testing.T, s spec) *server { return startGRPC(t, s, true) }},
}

func newRuns(routes []string) map[string]*atomic.Int64 {
	m := map[string]*atomic.Int64{}
	for _, r := range routes {
		m[r] = new(atomic.Int64)
	}
	return m
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func (s spec) log() *slog.Logger {
	if s.logger != nil {
		return s.logger
	}
	return discardLogger()
}

func costOf(v string) int64 {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 1
	}
	return n
}

// serveHTTP runs h on a loopback listener and returns the server.
func serveHTTP(t *testing.T, h http.Handler, runs map[string]*atomic.Int64) *server {
	ts := httptest.NewUnstartedServer(h)
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // recovered panics
	ts.Start()
	var once sync.Once
	stop := func() { once.Do(ts.Close) }
	t.Cleanup(stop)
	addr := ts.Listener.Addr().String()
	return &server{
		runs:       runs,
		newClient:  func() client { return &rawClient{addr: addr} },
		disconnect: func(r request) { rawDisconnect(addr, r) },
		stop:       stop,
	}
}

func startNetHTTP(t *testing.T, s spec) *server {
	runs := newRuns(s.routes)
	mux := http.NewServeMux()
	for _, r := range s.routes {
		n := runs[r]
		mux.HandleFunc("/"+r, func(w http.ResponseWriter, _ *http.Request) {
			n.Add(1)
			_, _ = io.WriteString(w, "ok")
		})
	}
	opts := []httplimit.Option{httplimit.WithLogger(s.log())}
	if s.cost {
		opts = append(opts, httplimit.WithCost(func(r *http.Request) int64 { return costOf(r.Header.Get("X-Cost")) }))
	}
	if s.refuse {
		opts = append(opts, httplimit.WithErrorHandler(func(w http.ResponseWriter, _ *http.Request, _ error) bool {
			w.WriteHeader(http.StatusServiceUnavailable)
			return false
		}))
	}
	return serveHTTP(t, httplimit.New(s.limiter, opts...)(mux), runs)
}

func startGin(t *testing.T, s spec) *server {
	runs := newRuns(s.routes)
	e := gin.New()
	opts := []ginlimit.Option{ginlimit.WithLogger(s.log())}
	if s.cost {
		opts = append(opts, ginlimit.WithCost(func(c *gin.Context) int64 { return costOf(c.GetHeader("X-Cost")) }))
	}
	if s.refuse {
		opts = append(opts, ginlimit.WithErrorHandler(func(c *gin.Context, _ error) bool {
			c.AbortWithStatus(http.StatusServiceUnavailable)
			return false
		}))
	}
	e.Use(ginlimit.New(s.limiter, opts...))
	for _, r := range s.routes {
		n := runs[r]
		h := func(c *gin.Context) { n.Add(1); c.String(http.StatusOK, "ok") }
		e.GET("/"+r, h)
		e.POST("/"+r, h)
	}
	return serveHTTP(t, e, runs)
}

func startEcho(t *testing.T, s spec) *server {
	runs := newRuns(s.routes)
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Logger.SetOutput(io.Discard)
	opts := []echolimit.Option{echolimit.WithLogger(s.log())}
	if s.cost {
		opts = append(opts, echolimit.WithCost(func(c echo.Context) int64 { return costOf(c.Request().Header.Get("X-Cost")) }))
	}
	if s.refuse {
		opts = append(opts, echolimit.WithErrorHandler(func(c echo.Context, _ error) (bool, error) {
			return false, c.NoContent(http.StatusServiceUnavailable)
		}))
	}
	e.Use(echolimit.New(s.limiter, opts...))
	for _, r := range s.routes {
		n := runs[r]
		h := func(c echo.Context) error { n.Add(1); return c.String(http.StatusOK, "ok") }
		e.GET("/"+r, h)
		e.POST("/"+r, h)
	}
	return serveHTTP(t, e, runs)
}

func startFiber(t *testing.T, s spec) *server {
	runs := newRuns(s.routes)
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	opts := []fiberlimit.Option{fiberlimit.WithLogger(s.log())}
	if s.cost {
		opts = append(opts, fiberlimit.WithCost(func(c *fiber.Ctx) int64 { return costOf(c.Get("X-Cost")) }))
	}
	if s.refuse {
		opts = append(opts, fiberlimit.WithErrorHandler(func(c *fiber.Ctx, _ error) (bool, error) {
			return false, c.SendStatus(fiber.StatusServiceUnavailable)
		}))
	}
	app.Use(fiberlimit.New(s.limiter, opts...))
	for _, r := range s.routes {
		n := runs[r]
		h := func(c *fiber.Ctx) error { n.Add(1); return c.SendString("ok") }
		app.Get("/"+r, h)
		app.Post("/"+r, h)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() { defer close(done); _ = app.Listener(ln) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = app.ShutdownWithTimeout(10 * time.Second)
			<-done
		})
	}
	t.Cleanup(stop)
	addr := ln.Addr().String()
	return &server{
		runs:       runs,
		newClient:  func() client { return &rawClient{addr: addr} },
		disconnect: func(r request) { rawDisconnect(addr, r) },
		stop:       stop,
	}
}

// startGRPC serves each route as a unary method, or with stream as a
// bidirectional stream (limited when it opens) that echoes every message.
func startGRPC(t *testing.T, s spec, stream bool) *server {
	runs := newRuns(s.routes)
	desc := grpc.ServiceDesc{ServiceName: grpcService, HandlerType: (*any)(nil)}
	for _, r := range s.routes {
		n := runs[r]
		full := grpcPath(r)
		if stream {
			desc.Streams = append(desc.Streams, grpc.StreamDesc{StreamName: r, ServerStreams: true, ClientStreams: true,
				Handler: func(_ any, ss grpc.ServerStream) error {
					n.Add(1)
					for {
						in := new(wrapperspb.StringValue)
						if err := ss.RecvMsg(in); err == io.EOF {
							return nil
						} else if err != nil {
							return err
						}
						if err := ss.SendMsg(wrapperspb.String("ok")); err != nil {
							return err
						}
					}
				}})
			continue
		}
		desc.Methods = append(desc.Methods, grpc.MethodDesc{MethodName: r,
			Handler: func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
				in := new(wrapperspb.StringValue)
				if err := dec(in); err != nil {
					return nil, err
				}
				h := func(context.Context, any) (any, error) {
					n.Add(1)
					return wrapperspb.String("ok"), nil
				}
				if icpt == nil {
					return h(ctx, in)
				}
				return icpt(ctx, in, &grpc.UnaryServerInfo{FullMethod: full}, h)
			}})
	}
	opts := []grpclimit.Option{grpclimit.WithLogger(s.log())}
	if s.cost {
		opts = append(opts, grpclimit.WithCost(func(ctx context.Context, _ string, _ any) int64 {
			md, _ := metadata.FromIncomingContext(ctx)
			if v := md.Get("x-cost"); len(v) > 0 {
				return costOf(v[0])
			}
			return 1
		}))
	}
	if s.refuse {
		opts = append(opts, grpclimit.WithErrorHandler(grpclimit.FailClosed))
	}
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(s.limiter, opts...)),
		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(s.limiter, opts...)))
	gs.RegisterService(&desc, struct{}{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(ln) }()
	var conns []*grpc.ClientConn
	var mu sync.Mutex
	var once sync.Once
	stop := func() {
		once.Do(func() {
			mu.Lock()
			for _, c := range conns {
				_ = c.Close()
			}
			mu.Unlock()
			gs.GracefulStop()
			<-done
		})
	}
	t.Cleanup(stop)
	dial := func() *grpc.ClientConn {
		cc, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithStatsHandler(sentHandler{}))
		require.NoError(t, err)
		mu.Lock()
		conns = append(conns, cc)
		mu.Unlock()
		return cc
	}
	shared := dial()
	return &server{
		runs:      runs,
		newClient: func() client { return &grpcClient{cc: dial(), stream: stream} },
		disconnect: func(r request) {
			sent := &sentSignal{ch: make(chan struct{})}
			ctx, cancel := context.WithCancel(context.WithValue(context.Background(), sentKey{}, sent))
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, _ = (&grpcClient{cc: shared, stream: stream}).do(ctx, r)
			}()
			select { // the call is on the wire (or over already)
			case <-sent.ch:
			case <-done:
			}
			cancel()
			<-done
		},
		stop: stop,
	}
}

// sentHandler is a client stats.Handler that tells a call whose context
// carries a sentSignal (under sentKey) that its request message has been
// handed to the transport.
type sentHandler struct{}

type sentKey struct{}

type sentSignal struct {
	once sync.Once
	ch   chan struct{}
}

func (sentHandler) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (sentHandler) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if _, ok := s.(*stats.OutPayload); !ok {
		return
	}
	if sig, ok := ctx.Value(sentKey{}).(*sentSignal); ok {
		sig.once.Do(func() { close(sig.ch) })
	}
}

func (sentHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (sentHandler) HandleConn(context.Context, stats.ConnStats) {}

// ---- HTTP/1.1 on a raw connection: request targets go out verbatim ----

type rawClient struct {
	addr string
	conn net.Conn
	br   *bufio.Reader
}

func writeRaw(w io.Writer, r request) error {
	method := r.method
	if method == "" {
		method = http.MethodGet
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: attack.test\r\n", method, r.path)
	for k, v := range r.header {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	b.WriteString("Content-Length: 0\r\n\r\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func (c *rawClient) do(ctx context.Context, r request) (int, error) {
	if c.conn == nil {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", c.addr)
		if err != nil {
			return 0, err
		}
		c.conn, c.br = conn, bufio.NewReader(conn)
	}
	_ = c.conn.SetDeadline(time.Now().Add(20 * time.Second))
	if err := writeRaw(c.conn, r); err != nil {
		c.close()
		return 0, err
	}
	method := r.method
	if method == "" {
		method = http.MethodGet
	}
	resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
	if err != nil {
		c.close()
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.Close {
		c.close()
	}
	return resp.StatusCode, nil
}

func (c *rawClient) close() {
	if c.conn != nil {
		_ = c.conn.Close()
		c.conn, c.br = nil, nil
	}
}

// rawDisconnect sends r on a new connection and closes it at once.
func rawDisconnect(addr string, r request) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return
	}
	_ = writeRaw(conn, r)
	_ = conn.Close()
}

// ---- gRPC ----

// grpcClient calls unary methods, or with stream opens a bidirectional
// stream, sends one message and reads the answer.
type grpcClient struct {
	cc     *grpc.ClientConn
	stream bool
}

func (c *grpcClient) call(ctx context.Context, method string) error {
	if !c.stream {
		return c.cc.Invoke(ctx, method, wrapperspb.String("x"), new(wrapperspb.StringValue))
	}
	st, err := c.cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
	if err != nil {
		return err
	}
	if err := st.SendMsg(wrapperspb.String("x")); err != nil && err != io.EOF {
		return err
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	// The answer, or the status the stream ended with; then the end.
	if err := st.RecvMsg(new(wrapperspb.StringValue)); err != nil {
		return err
	}
	if err := st.RecvMsg(new(wrapperspb.StringValue)); err != io.EOF {
		return err
	}
	return nil
}

func (c *grpcClient) do(ctx context.Context, r request) (int, error) {
	for k, v := range r.header {
		ctx = metadata.AppendToOutgoingContext(ctx, strings.ToLower(k), v)
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	err := c.call(ctx, r.path)
	switch status.Code(err) {
	case codes.OK:
		return http.StatusOK, nil
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests, nil
	case codes.Unavailable:
		if errors.Is(ctx.Err(), context.Canceled) {
			return 0, err
		}
		return http.StatusServiceUnavailable, nil
	case codes.Unimplemented:
		return http.StatusNotFound, nil
	case codes.Canceled, codes.DeadlineExceeded:
		return 0, err
	default:
		return http.StatusInternalServerError, nil
	}
}

func (c *grpcClient) close() {}

// ---- stores ----

// storeKind opens a fresh, empty store of one kind.
type storeKind struct {
	name   string
	memory bool
	open   func(t *testing.T) core.Store
}

var prefixSeq atomic.Int64

// stores returns the stores every class runs on: memory, a real Redis, and
// that Redis behind the guard (fail open with a deny cache, as deployments
// run it). The Redis
// server is started once per call, for the calling (top-level) test, and
// each store gets its own key prefix.
func stores(t *testing.T) []storeKind {
	srv := redistest.StartServer(t)
	redisStore := func(t *testing.T) *redisstore.Store {
		// A generous timeout: the suite tests what is decided, not how
		// fast, on two shared cores under -race, and a timed-out call would
		// fail open and look like a bypass.
		rs, err := redisstore.New(srv.Client(t), redisstore.WithPrefix(fmt.Sprintf("atk%d", prefixSeq.Add(1))),
			redisstore.WithTimeout(2*time.Second))
		require.NoError(t, err)
		return rs
	}
	return []storeKind{
		{name: "memory", memory: true, open: func(t *testing.T) core.Store {
			s, err := memorystore.New()
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			return s
		}},
		{name: "redis", open: func(t *testing.T) core.Store { return redisStore(t) }},
		{name: "redis+guard", open: func(t *testing.T) core.Store {
			failures := new(failureCounter)
			g, err := guard.New(redisStore(t), guard.WithFailOpen(), guard.WithTimeout(2*time.Second),
				guard.WithDenyCache(guard.DenyCache{MaxKeys: 10_000}), guard.WithObserver(failures))
			require.NoError(t, err)
			t.Cleanup(func() {
				if n := failures.n.Load(); n > 0 || t.Failed() {
					t.Logf("guard: %d failed backend calls (each failed open)", n)
				}
			})
			t.Cleanup(func() { _ = g.Close() })
			return g
		}},
	}
}

// each runs f for every adapter on every store, as subtests adapter/store.
// The Redis server lives as long as the calling test.
func each(t *testing.T, f func(t *testing.T, a adapter, st storeKind)) {
	ss := stores(t)
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			for _, st := range ss {
				t.Run(st.name, func(t *testing.T) { f(t, a, st) })
			}
		})
	}
}

// newLimiter builds a limiter, failing the test on error.
func newLimiter(t *testing.T, s core.Store, ps []core.Policy, opts ...core.LimiterOption) *core.Limiter {
	t.Helper()
	l, err := core.NewLimiter(s, ps, opts...)
	require.NoError(t, err)
	return l
}

// ip is the client-address key, from the transport peer only.
func ip(t *testing.T) keyfunc.Func {
	f := keyfunc.IP()
	return f
}

// sendAll sends every request of rs from workers clients at once and
// returns the statuses, in order; transport errors are 0.
func sendAll(t *testing.T, s *server, workers int, rs []request) []int {
	t.Helper()
	out := make([]int, len(rs))
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := s.newClient()
			defer c.close()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(rs) {
					return
				}
				st, err := c.do(context.Background(), rs[i])
				if err != nil {
					st = 0
				}
				out[i] = st
			}
		}()
	}
	wg.Wait()
	return out
}

// repeat returns n copies of r.
func repeat(r request, n int) []request {
	out := make([]request, n)
	for i := range out {
		out[i] = r
	}
	return out
}

// countStatus counts the statuses equal to code.
func countStatus(sts []int, code int) int {
	n := 0
	for _, s := range sts {
		if s == code {
			n++
		}
	}
	return n
}

// logCounter is a slog.Handler counting records at or above Warn.
type logCounter struct{ warns *atomic.Int64 }

func (h logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h logCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.warns.Add(1)
	}
	return nil
}
func (h logCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h logCounter) WithGroup(string) slog.Handler      { return h }

// failureCounter is a guard.Observer counting failed backend calls.
type failureCounter struct{ n atomic.Int64 }

func (f *failureCounter) CircuitChanged(_, _ guard.Circuit)        {}
func (f *failureCounter) BackendFailed(_ guard.ErrorKind, _ error) { f.n.Add(1) }
