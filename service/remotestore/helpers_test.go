package remotestore_test

import (
	"bytes"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/service/remotestore"
)

// server is a StoreService on a loopback port, stopped at the test's end.
type server struct {
	addr string
	srv  *grpc.Server
	done chan struct{}
}

// serve starts a StoreService deciding on store, on addr ("127.0.0.1:0"
// for a fresh port).
func serve(t testing.TB, store core.Store, addr string, opts ...remotestore.ServerOption) *server {
	t.Helper()
	return serveGRPC(t, store, addr, nil, opts...)
}

// serveGRPC is serve with options for the gRPC server.
func serveGRPC(t testing.TB, store core.Store, addr string, gopts []grpc.ServerOption, opts ...remotestore.ServerOption) *server {
	t.Helper()
	var ln net.Listener
	var err error
	// A restarted server takes its old port back: retry while the kernel
	// still holds it.
	require.Eventually(t, func() bool {
		ln, err = net.Listen("tcp", addr)
		return err == nil
	}, time.Second, 20*time.Millisecond, "listening on %s", addr)
	s := &server{addr: ln.Addr().String(), srv: grpc.NewServer(append(remotestore.ServerOptions(), gopts...)...), done: make(chan struct{})}
	remotestore.NewServer(store, opts...).Register(s.srv)
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln)
	}()
	t.Cleanup(s.stop)
	return s
}

// stop stops the server at once (open calls fail) and waits for it.
func (s *server) stop() {
	s.srv.Stop()
	<-s.done
}

// dial returns a client connection to addr with remotestore.DialOptions,
// closed at the test's end.
func dial(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, append(remotestore.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return conn
}

// memory returns a memory store on clock, closed at the test's end.
func memory(t testing.TB, clock func() time.Time) *memorystore.Store {
	t.Helper()
	opts := []memorystore.Option{}
	if clock != nil {
		opts = append(opts, memorystore.WithClock(clock))
	}
	m, err := memorystore.New(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

// remote returns a remote store whose server decides on backend.
func remote(t testing.TB, backend core.Store, opts ...remotestore.ServerOption) (*remotestore.Store, *server) {
	t.Helper()
	srv := serve(t, backend, "127.0.0.1:0", opts...)
	return remotestore.New(dial(t, srv.addr)), srv
}

// logBuffer is a slog text handler's output, safe for concurrent writes.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

// redisBackend is a Redis store on a real redis-server.
type redisBackend struct {
	server *redistest.Server
	store  *redisstore.Store
}

// newRedisStore returns a Redis store on srv, closed at the test's end; its
// calls fail fast once srv is gone.
func newRedisStore(t testing.TB, srv *redistest.Server) (*redisBackend, error) {
	t.Helper()
	client := srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1; o.DialTimeout = 200 * time.Millisecond })
	rs, err := redisstore.New(client, redisstore.WithTimeout(time.Second))
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { rs.Close() })
	return &redisBackend{server: srv, store: rs}, nil
}
