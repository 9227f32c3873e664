package servicebench_test

import (
	"context"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/bench/redisbench"
	"github.com/sluicehq/sluice/bench/servicebench"
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

func TestEnvoyRatelimit(t *testing.T) {
	srv := redisbench.StartServerTB(t)
	p := envoyRatelimit(t, srv)
	limits(t, p.GRPCAddr)
	conns, err := servicebench.Dial(p.GRPCAddr, 2)
	require.NoError(t, err)
	defer conns[0].Close()
	defer conns[1].Close()
	load(t, servicebench.Target{Name: "envoy-ratelimit", Server: p, Redis: srv,
		Decider: servicebench.NewEnvoyDecider(conns, servicebench.Users(50)), ChecksPerCall: 1})
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

// TestServers runs envoyproxy/ratelimit with write buffering and the Redis
// store in the load generator through Servers, as the report does.
func TestServers(t *testing.T) {
	srv := redisbench.StartServerTB(t)
	dir, err := servicebench.CacheDir()
	require.NoError(t, err)
	servers := &servicebench.Servers{Redis: srv, GoCommand: servicebench.GoCommand(), CacheDir: dir, ServiceDir: "../../service", Log: testWriter{t}}
	defer servers.Close()
	ctx := context.Background()
	users := servicebench.Users(50)

	im := implNamed(t, "envoy-ratelimit-window")
	tgt, done, err := servers.Target(ctx, im, 2, 8, users)
	require.NoError(t, err)
	require.NotNil(t, tgt.Server)
	limits(t, tgt.Server.GRPCAddr)
	load(t, tgt)
	done()
	again, done, err := servers.Target(ctx, im, 1, 8, users)
	require.NoError(t, err)
	require.Same(t, tgt.Server, again.Server, "one process per server configuration")
	done()

	tgt, done, err = servers.Target(ctx, implNamed(t, "redisstore"), 2, 8, users)
	require.NoError(t, err)
	require.Nil(t, tgt.Server, "decided in the load generator")
	s := load(t, tgt)
	require.Zero(t, s.ServerCPU)
	done()
}
