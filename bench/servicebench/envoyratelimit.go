package servicebench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// envoyproxy/ratelimit, the reference implementation Envoy's rate-limit
// filter is documented against, at a pinned version.
const (
	EnvoyRatelimitModule  = "github.com/envoyproxy/ratelimit"
	EnvoyRatelimitPackage = EnvoyRatelimitModule + "/src/service_cmd"
	EnvoyRatelimitVersion = "v1.4.1-0.20260122083618-3fb702589d36"
)

// EnvoyRatelimitEnv is the environment envoyproxy/ratelimit runs with in
// every configuration (besides its ports, its Redis address and its runtime
// root): bound to loopback, Redis over TCP, the rules read once from
// RUNTIME_ROOT/ratelimit/config, and USE_STATSD=false as its README and
// docker-compose.yml run it (its settings default to a statsd sink on
// localhost:8125, which nothing here listens on). With USE_STATSD=false its
// stats go to gostats' logging sink: every counter and gauge on each flush
// (STATS_FLUSH_INTERVAL, 10 s) and every timer value as it is recorded, so
// one JSON line on stderr per ShouldRateLimit (its response_time timer).
// Everything else is its default: LOG_LEVEL=WARN, a pool of 10 Redis
// connections, no pipelining window, no local cache.
var EnvoyRatelimitEnv = []string{
	"GRPC_HOST=127.0.0.1", "HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1",
	"USE_STATSD=false", "REDIS_SOCKET_TYPE=tcp",
	"RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
}

// EnvoyLocalCacheBytes is LOCAL_CACHE_SIZE_IN_BYTES in envoyproxy/ratelimit's
// best configuration: 64 MiB, room for every key of the load many times
// over (its freecache holds the keys found over their limit, so that they
// are refused without a Redis call).
const EnvoyLocalCacheBytes = 64 << 20

// EnvoyPipelineWindow is REDIS_PIPELINE_WINDOW in envoyproxy/ratelimit's
// best configuration: 150 µs, as its README recommends (150-500 µs). At
// EnvoyRatelimitVersion (radix v4) the window sets the connections' write
// flush interval on a Redis Cluster only (src/redis/driver_impl.go); on a
// single node every write is flushed at once whatever it says, and
// REDIS_PIPELINE_LIMIT is ignored (deprecated, logged as such).
const EnvoyPipelineWindow = "150us"

// EnvoyPoolSize is REDIS_POOL_SIZE in envoyproxy/ratelimit's best
// configuration. radix v4 shares each pooled connection between concurrent
// calls, so a smaller pool carries more commands per write and read: over
// the sizes TuningImpls measures (2, 4, its default 10, 32) redis-server's
// CPU per check fell with the size (about 14 µs at 2 and 4, 17-18 µs at 10
// and 32, on a loaded machine) while the server's own stayed level within
// the noise; 2 and 4 were level, 4 measured in more rounds.
const EnvoyPoolSize = 4

// EnvoyBestEnv is envoyproxy/ratelimit's best documented configuration for
// this load, added to EnvoyRatelimitEnv: stats off (DISABLE_STATS=true, a
// null sink: nothing counted, nothing written), the local cache on, its
// recommended pipelining window and the pool size that pipelines best here.
var EnvoyBestEnv = []string{
	"DISABLE_STATS=true",
	fmt.Sprintf("LOCAL_CACHE_SIZE_IN_BYTES=%d", EnvoyLocalCacheBytes),
	"REDIS_PIPELINE_WINDOW=" + EnvoyPipelineWindow,
	fmt.Sprintf("REDIS_POOL_SIZE=%d", EnvoyPoolSize),
}

// InstallEnvoyRatelimit returns the path of envoyproxy/ratelimit's server
// binary in cacheDir, installing it there first (go install of
// EnvoyRatelimitPackage at EnvoyRatelimitVersion with GOBIN set, through the
// Go module proxy) when it is missing. The go command's output goes to log.
func InstallEnvoyRatelimit(ctx context.Context, goBin, cacheDir string, log io.Writer) (string, error) {
	dir := filepath.Join(cacheDir, "envoy-ratelimit-"+EnvoyRatelimitVersion)
	bin := filepath.Join(dir, "service_cmd")
	if st, err := os.Stat(bin); err == nil && st.Mode().IsRegular() {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("envoyproxy/ratelimit: cache: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "install", EnvoyRatelimitPackage+"@"+EnvoyRatelimitVersion)
	cmd.Dir = dir // outside any module: go install pkg@version ignores it anyway
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOWORK=off", "GOFLAGS=")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("envoyproxy/ratelimit: go install %s@%s: %w", EnvoyRatelimitPackage, EnvoyRatelimitVersion, err)
	}
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("envoyproxy/ratelimit: installed, but: %w", err)
	}
	return bin, nil
}

// StartEnvoyRatelimit starts envoyproxy/ratelimit's server bin on free
// loopback ports with EnvoyRatelimitEnv, on the redis-server at redisAddr,
// with rules written to a fresh RUNTIME_ROOT/ratelimit/config/config.yaml,
// and waits until it answers ShouldRateLimit under those rules.
func StartEnvoyRatelimit(ctx context.Context, bin, redisAddr string, rules []byte, extraEnv ...string) (*Process, error) {
	root, err := os.MkdirTemp("", "sluice-bench-envoy-ratelimit-")
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		os.RemoveAll(root)
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(conf, "config.yaml"), rules, 0o644); err != nil {
		os.RemoveAll(root)
		return nil, err
	}
	ports, err := freePorts(3)
	if err != nil {
		os.RemoveAll(root)
		return nil, err
	}
	env := append([]string{}, EnvoyRatelimitEnv...)
	env = append(env,
		"RUNTIME_ROOT="+root, "REDIS_URL="+redisAddr,
		"GRPC_PORT="+strconv.Itoa(ports[0]), "PORT="+strconv.Itoa(ports[1]), "DEBUG_PORT="+strconv.Itoa(ports[2]))
	env = append(env, extraEnv...)
	p, err := start("envoyproxy/ratelimit", bin, nil, env, root)
	if err != nil {
		return nil, err
	}
	p.GRPCAddr, p.HTTPAddr = loopback(ports[0]), loopback(ports[1])
	if err := p.waitReady(ctx, 30*time.Second, func(ctx context.Context) error { return probe(ctx, p.GRPCAddr) }); err != nil {
		return nil, err
	}
	return p, nil
}

// errNotReady is a probe's answer from a server whose rules are not loaded.
var errNotReady = errors.New("no limit applied to the probe yet")
