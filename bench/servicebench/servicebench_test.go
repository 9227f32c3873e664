package servicebench_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/bench/redisbench"
	"github.com/sluicehq/sluice/bench/servicebench"
	"github.com/sluicehq/sluice/service/ratelimitv1"
)

// testWriter sends a command's output to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Logf("%s", p); return len(p), nil }

func envoyRatelimit(t *testing.T, srv *redisbench.Server) *servicebench.Process {
	t.Helper()
	ctx := context.Background()
	dir, err := servicebench.CacheDir()
	require.NoError(t, err)
	bin, err := servicebench.InstallEnvoyRatelimit(ctx, servicebench.GoCommand(), dir, testWriter{t})
	require.NoError(t, err)
	p, err := servicebench.StartEnvoyRatelimit(ctx, bin, srv.Addr, servicebench.RulesYAML())
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	return p
}

// limits checks that the server at addr applies the rules: TinyLimit checks
// of one tiny value are allowed, the next denied.
func limits(t *testing.T, addr string) {
	t.Helper()
	conns, err := servicebench.Dial(addr, 1)
	require.NoError(t, err)
	defer conns[0].Close()
	c := rlsv3.NewRateLimitServiceClient(conns[0])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var codes []rlsv3.RateLimitResponse_Code
	for range servicebench.TinyLimit + 2 {
		resp, err := c.ShouldRateLimit(ctx, servicebench.Request(servicebench.TinyKey, t.Name()))
		require.NoError(t, err)
		codes = append(codes, resp.GetOverallCode())
	}
	want := make([]rlsv3.RateLimitResponse_Code, servicebench.TinyLimit+2)
	for i := range want {
		want[i] = rlsv3.RateLimitResponse_OK
		if i >= servicebench.TinyLimit {
			want[i] = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}
	require.Equal(t, want, codes)
	resp, err := c.ShouldRateLimit(ctx, servicebench.Request(servicebench.UserKey, "limits"))
	require.NoError(t, err)
	require.NoError(t, servicebench.CheckLimit(resp))
}

// load runs a short load on target and checks what it measured.
func load(t *testing.T, target servicebench.Target) servicebench.Sample {
	t.Helper()
	s, err := servicebench.Run(context.Background(), target, servicebench.RunConfig{
		Callers: 8, Users: servicebench.Users(50), Warmup: 50 * time.Millisecond, Duration: 300 * time.Millisecond,
	})
	require.NoError(t, err)
	require.Positive(t, s.Calls)
	require.Equal(t, s.Calls*int64(max(target.ChecksPerCall, 1)), s.Checks)
	require.Positive(t, s.PerSec)
	require.Positive(t, s.P50)
	require.GreaterOrEqual(t, s.P99, s.P50)
	require.GreaterOrEqual(t, s.Max, s.P999)
	if target.Server != nil {
		require.Positive(t, s.ServerCPU, "the server did work during the run")
	}
	require.Positive(t, s.LoadCPU, "the load generator did work during the run")
	if target.Redis != nil {
		require.Positive(t, s.RedisCPU, "redis-server did work during the run")
	}
	return s
}

// TestEnvoyRatelimit runs envoyproxy/ratelimit in its default
// configuration (USE_STATSD=false) and checks what the report says of it:
// its stats go to its log, one response_time line per call.
func TestEnvoyRatelimit(t *testing.T) {
	srv := redisbench.StartServerTB(t)
	p := envoyRatelimit(t, srv)
	limits(t, p.GRPCAddr)
	conns, err := servicebench.Dial(p.GRPCAddr, 2)
	require.NoError(t, err)
	defer conns[0].Close()
	defer conns[1].Close()
	s := load(t, servicebench.Target{Name: "envoy-ratelimit-default", Server: p, Redis: srv,
		Decider: servicebench.NewEnvoyDecider(conns, servicebench.Users(50)), ChecksPerCall: 1})
	require.Greater(t, s.ServerLog, 50*s.Checks, "a JSON line of stats per call: %d bytes for %d checks", s.ServerLog, s.Checks)
	require.Contains(t, p.Output(), "response_time")
	require.NoError(t, p.Close())
	exited, _ := p.Exited()
	require.True(t, exited)
}

func implNamed(t *testing.T, name string) servicebench.Impl {
	t.Helper()
	for _, im := range servicebench.Impls() {
		if im.Name == name {
			return im
		}
	}
	t.Fatalf("no implementation %q", name)
	return servicebench.Impl{}
}

// TestServers runs envoyproxy/ratelimit's best configuration (stats off:
// nothing logged per call), the floor on both its APIs and the Redis store
// in the load generator through Servers, as the report does, open loop
// too.
func TestServers(t *testing.T) {
	srv := redisbench.StartServerTB(t)
	servers := newServers(t, srv, false)
	ctx := context.Background()
	users := servicebench.Users(50)

	im := implNamed(t, "envoy-ratelimit-best")
	tgt, done, err := servers.Target(ctx, im, 2, 8, users)
	require.NoError(t, err)
	require.NotNil(t, tgt.Server)
	limits(t, tgt.Server.GRPCAddr)
	s := load(t, tgt)
	require.Less(t, s.ServerLog, s.Checks, "stats off: no line per call (%d bytes for %d checks)", s.ServerLog, s.Checks)
	require.NotContains(t, tgt.Server.Output(), "response_time")
	open := loadOpen(t, tgt)
	require.Positive(t, open.RedisCPU)
	done()
	again, done, err := servers.Target(ctx, im, 1, 8, users)
	require.NoError(t, err)
	require.Same(t, tgt.Server, again.Server, "one process per server configuration")
	done()

	floor, done, err := servers.Target(ctx, implNamed(t, "grpc-floor"), 2, 8, users)
	require.NoError(t, err)
	defer done()
	require.NoError(t, servicebench.CheckLimit(mustShould(t, floor.Server.GRPCAddr)), "the floor's constant answer carries the rules' limit")
	fs := load(t, floor)
	require.Zero(t, fs.RedisCPU)
	native, done, err := servers.Target(ctx, implNamed(t, "grpc-floor-native"), 2, 8, users)
	require.NoError(t, err)
	defer done()
	require.Same(t, floor.Server, native.Server, "one floor for both APIs")
	load(t, native)
	loadOpen(t, native)

	tgt, done, err = servers.Target(ctx, implNamed(t, "redisstore"), 2, 8, users)
	require.NoError(t, err)
	require.Nil(t, tgt.Server, "decided in the load generator")
	s = load(t, tgt)
	require.Zero(t, s.ServerCPU)
	done()
}

// TestRatelimitd builds ratelimitd from the service module and runs its
// native API (single checks, batches of BatchSize, the HTTP JSON check) on
// its memory store and on Redis, profiled; and the remote store through
// ratelimitd on Redis. ratelimitd and the floor link the same grpc-go (the
// floor measures ratelimitd's gRPC).
func TestRatelimitd(t *testing.T) {
	srv := redisbench.StartServerTB(t)
	servers := newServers(t, srv, true)
	ctx := context.Background()
	users := servicebench.Users(200)
	rl, fl, err := servers.GRPCVersions(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, rl)
	require.Equal(t, rl, fl, "grpc-go of ratelimitd and of the floor")

	tgt, done, err := servers.Target(ctx, implNamed(t, "ratelimitd-memory-native"), 1, 8, users)
	require.NoError(t, err)
	defer done()
	require.NotEmpty(t, tgt.Server.PprofAddr)
	c := ratelimitv1.NewRateLimitServiceClient(mustDial(t, tgt.Server.GRPCAddr))
	var allowed []bool
	for range servicebench.TinyLimit + 2 {
		resp, err := c.CheckRateLimit(ctx, servicebench.NativeCheck(servicebench.TinyKey, t.Name()))
		require.NoError(t, err)
		allowed = append(allowed, resp.GetAllowed())
	}
	require.Equal(t, []bool{true, true, true, true, true, false, false}, allowed)
	load(t, tgt)

	for _, name := range []string{"ratelimitd-memory-batch100", "ratelimitd-redis-batch100"} {
		batch, done, err := servers.Target(ctx, implNamed(t, name), 1, 8, users)
		require.NoError(t, err)
		defer done()
		require.Equal(t, servicebench.BatchSize, batch.ChecksPerCall)
		s, err := servicebench.Run(ctx, batch, servicebench.RunConfig{Callers: 8, Users: users, Warmup: 50 * time.Millisecond, Duration: time.Second, Profile: true})
		require.NoError(t, err, name)
		require.Equal(t, int64(servicebench.BatchSize)*s.Calls, s.Checks)
		require.NoError(t, s.ProfileErr)
		require.Positive(t, s.Profile.Total)
		// Batches of 100 spend most in the decision, little in gRPC: a short
		// profile of a loaded machine may sample either alone.
		require.Positive(t, s.Profile.Share("gRPC and HTTP/2")+s.Profile.Share("decision (engine, rules, core, algorithms, store)"),
			"the profile is ratelimitd's: %+v", s.Profile.Shares)
	}
	mem := implNamed(t, "ratelimitd-memory-batch100")
	batch, done, err := servers.Target(ctx, mem, 1, 8, users)
	require.NoError(t, err)
	defer done()
	require.Same(t, tgt.Server, batch.Server, "one process for the native rows of a store")

	for _, name := range []string{"ratelimitd-memory-http", "ratelimitd-redis-http"} {
		h, done, err := servers.Target(ctx, implNamed(t, name), 1, 8, users)
		require.NoError(t, err)
		defer done()
		require.NotEmpty(t, h.Server.HTTPAddr)
		load(t, h)
		loadOpen(t, h)
	}
	httpLimits(t, tgt.Server.HTTPAddr)

	remote, done, err := servers.Target(ctx, implNamed(t, "remotestore"), 1, 8, users)
	require.NoError(t, err)
	defer done()
	rs := load(t, remote)
	require.Positive(t, rs.RedisCPU)
}

// httpLimits checks that the HTTP decider tells a denial apart: TinyLimit
// checks of one tiny value allowed, the next denied.
func httpLimits(t *testing.T, addr string) {
	t.Helper()
	body := servicebench.HTTPCheckBody(servicebench.TinyKey, t.Name()+"-http")
	var allowed []bool
	for range servicebench.TinyLimit + 2 {
		ok, err := servicebench.PostCheck(context.Background(), http.DefaultClient, addr, body)
		require.NoError(t, err)
		allowed = append(allowed, ok)
	}
	require.Equal(t, []bool{true, true, true, true, true, false, false}, allowed)
}

func newServers(t *testing.T, srv *redisbench.Server, profile bool) *servicebench.Servers {
	t.Helper()
	dir, err := servicebench.CacheDir()
	require.NoError(t, err)
	servers := &servicebench.Servers{Redis: srv, GoCommand: servicebench.GoCommand(), CacheDir: dir, ServiceDir: "../../service", BenchDir: "..", Log: testWriter{t}, Profile: profile}
	t.Cleanup(func() { servers.Close() })
	return servers
}

// loadOpen runs a short open-loop load on target and checks what it
// measured.
func loadOpen(t *testing.T, target servicebench.Target) servicebench.Sample {
	t.Helper()
	s, err := servicebench.Run(context.Background(), target, servicebench.RunConfig{
		Callers: 8, Users: servicebench.Users(50), Warmup: 50 * time.Millisecond, Duration: 300 * time.Millisecond, Rate: 500,
	})
	require.NoError(t, err)
	require.InDelta(t, 150, s.Calls, 1, "the schedule's calls")
	require.Positive(t, s.P99)
	require.GreaterOrEqual(t, s.P99, s.P50)
	require.LessOrEqual(t, s.MaxInFlight, int64(8))
	require.Positive(t, s.ServerCPU+s.LoadCPU)
	return s
}

// mustShould asks the server at addr for one ShouldRateLimit.
func mustShould(t *testing.T, addr string) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := rlsv3.NewRateLimitServiceClient(mustDial(t, addr)).ShouldRateLimit(context.Background(), servicebench.Request(servicebench.UserKey, "floor"))
	require.NoError(t, err)
	return resp
}

func mustDial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conns, err := servicebench.Dial(addr, 1)
	require.NoError(t, err)
	t.Cleanup(func() { conns[0].Close() })
	return conns[0]
}
