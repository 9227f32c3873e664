package attack

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/envoyrls"
	"github.com/sluicehq/sluice/service/grpcapi"
	"github.com/sluicehq/sluice/service/httpapi"
	"github.com/sluicehq/sluice/service/ratelimitv1"
	"github.com/sluicehq/sluice/service/remotestore"
	"github.com/sluicehq/sluice/service/rules"
)

// stack is one ratelimitd instance in process: an engine on a store under
// a rules file, with every front door on loopback (the native API, Envoy's
// RLS and the store API on one gRPC server; the HTTP check API and Envoy's
// /json on one HTTP server) and clients of each.
type stack struct {
	eng    *engine.Engine
	rules  string // the rules file, rewritable (the engine follows it)
	logs   *lockedBuffer
	native ratelimitv1.RateLimitServiceClient
	envoy  rlsv3.RateLimitServiceClient
	remote *remotestore.Store // a core.Store on the instance's store, over gRPC
	conn   *grpc.ClientConn   // to the instance's gRPC server
	http   string             // base URL
}

// startStack starts an instance on store under the rules in yaml.
func startStack(t *testing.T, store core.Store, yaml string, opts ...engine.Option) *stack {
	t.Helper()
	return startStackWith(t, store, yaml, nil, opts...)
}

// startStackWith is startStack with options of the rules file source.
func startStackWith(t *testing.T, store core.Store, yaml string, ropts []rules.Option, opts ...engine.Option) *stack {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(path, []byte(yaml), 0o600))
	s := startStackOn(t, store, rules.NewFile(path, ropts...), opts...)
	s.rules = path
	return s
}

// fixedSource is a rules.Source of one snapshot that never changes (one
// rules.New builds: native and Envoy rules together, with overrides).
type fixedSource struct{ snap *rules.Snapshot }

func (f fixedSource) Load(context.Context) (*rules.Snapshot, error) { return f.snap, nil }

func (f fixedSource) Watch(ctx context.Context, _ func(*rules.Snapshot) error, _ func(error)) error {
	<-ctx.Done()
	return nil
}

// startStackOn starts an instance on store under the rules of src.
func startStackOn(t *testing.T, store core.Store, src rules.Source, opts ...engine.Option) *stack {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	eng, err := engine.New(ctx, store, src, append([]engine.Option{engine.WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
	require.NoError(t, err)
	done := make(chan struct{})
	go func() { defer close(done); _ = eng.Run(ctx) }()

	logs := &lockedBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := grpc.NewServer()
	grpcapi.New(eng, grpcapi.WithLogger(log)).Register(g)
	env := envoyrls.New(eng, envoyrls.WithLogger(log))
	env.Register(g)
	remotestore.NewServer(store, remotestore.WithLogger(log)).Register(g)
	go func() { _ = g.Serve(lis) }()

	mux := http.NewServeMux()
	mux.Handle(httpapi.Path, httpapi.New(eng, httpapi.WithLogger(log)))
	mux.Handle("/json", env.JSONHandler())
	hs := httptest.NewServer(mux)

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() {
		conn.Close()
		hs.Close()
		g.Stop()
		cancel()
		<-done
	})
	return &stack{
		eng:    eng,
		logs:   logs,
		native: ratelimitv1.NewRateLimitServiceClient(conn),
		envoy:  rlsv3.NewRateLimitServiceClient(conn),
		remote: remotestore.New(conn),
		conn:   conn,
		http:   hs.URL,
	}
}

// httpCheck posts body to the HTTP check API and returns the status and
// the decoded answer (or problem).
func (s *stack) httpCheck(t *testing.T, body any) (int, map[string]any) {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	return s.post(t, httpapi.Path, "application/json", b)
}

// httpGet asks the HTTP check API with the fields in the query and returns
// the status and the decoded answer (or problem).
func (s *stack) httpGet(t *testing.T, q url.Values) (int, map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.http+httpapi.Path+"?"+q.Encode(), nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out map[string]any
	if len(raw) > 0 {
		require.NoError(t, json.Unmarshal(raw, &out), "body %q", raw)
	}
	return resp.StatusCode, out
}

func (s *stack) post(t *testing.T, path, ctype string, body []byte) (int, map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.http+path, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", ctype)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out map[string]any
	if len(raw) > 0 {
		require.NoError(t, json.Unmarshal(raw, &out), "body %q", raw)
	}
	return resp.StatusCode, out
}

// memStore is a memory store, closed at the test's end.
func memStore(t testing.TB, opts ...memorystore.Option) core.Store {
	t.Helper()
	s, err := memorystore.New(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// redisStore is a Redis store on the redis-server at addr.
func redisStore(t testing.TB, addr string, opts ...redisstore.Option) core.Store {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	s, err := redisstore.New(c, append([]redisstore.Option{redisstore.WithTimeout(5 * time.Second)}, opts...)...)
	require.NoError(t, err)
	return s
}

// frozenStore is a store of backend ("memory", or "redis": a Redis store
// on the redis-server at addr) deciding on a clock that stands still at
// limitertest.NewClock's instant (on the hour, ahead of the real time that
// Redis expires its keys on), so that no window ends during a test; now is
// that clock, for the engine (engine.WithClock) and the rules.
func frozenStore(t testing.TB, backend, addr string) (store core.Store, now func() time.Time) {
	t.Helper()
	at := limitertest.NewClock().Now()
	now = func() time.Time { return at }
	if backend == "memory" {
		return memStore(t, memorystore.WithClock(now)), now
	}
	return redisStore(t, addr, redisstore.WithClock(now)), now
}

// newRedis starts a redis-server for the test.
func newRedis(t testing.TB) string {
	t.Helper()
	return redistest.StartServer(t).Addr
}
