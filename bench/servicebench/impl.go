package servicebench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/bench/redisbench"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/redisstore"
)

// Server says which program an implementation runs.
type Server uint8

const (
	// EnvoyRatelimit is envoyproxy/ratelimit's server, on Redis.
	EnvoyRatelimit Server = iota
	// Ratelimitd is sluice's service.
	Ratelimitd
	// InProcess is no server: the load generator decides itself (sluice's
	// Redis store, the yardstick of the remote store).
	InProcess
	// Floor is the bare grpc-go server with constant answers
	// (cmd/grpcfloor): what gRPC costs a rate-limit server per check.
	Floor
)

func (s Server) String() string {
	switch s {
	case EnvoyRatelimit:
		return "envoyproxy/ratelimit"
	case Ratelimitd:
		return "ratelimitd"
	case Floor:
		return "grpc-go floor"
	}
	return "none (in the load generator)"
}

// Group is the table of the report an implementation belongs to.
type Group uint8

const (
	// Envoy: ShouldRateLimit, the comparison with envoyproxy/ratelimit.
	Envoy Group = iota
	// Native: ratelimitd's own CheckRateLimit, one check per call.
	Native
	// Batch: CheckRateLimitBatch of BatchSize checks.
	Batch
	// HTTP: ratelimitd's HTTP JSON check.
	HTTP
	// Remote: the remote store against sluice's Redis store.
	Remote
)

// Conn is what a decider is built on.
type Conn struct {
	// GRPC are the connections to the server (none for InProcess).
	GRPC []*grpc.ClientConn
	// HTTPAddr is the server's HTTP listener, if it has one.
	HTTPAddr string
	// RedisAddr is the shared redis-server.
	RedisAddr string
	// Users are the identities of the load, Callers its callers.
	Users   []string
	Callers int
}

// Impl is one server configuration and one kind of call under comparison.
type Impl struct {
	// Name is the -impls and sub-benchmark name.
	Name   string
	Server Server
	Group  Group
	// Redis says the decisions are made on the shared redis-server; false is
	// ratelimitd's memory store.
	Redis bool
	// Rules is the server's rules file (nil: RulesYAML, Envoy's format).
	Rules []byte
	// Ready tells a server started with Rules that it applies them (nil:
	// a ShouldRateLimit probe under RulesYAML).
	Ready func(ctx context.Context, grpcAddr string) error
	// Env is added to envoyproxy/ratelimit's environment.
	Env []string
	// API is what one call is, for the report.
	API string
	// ChecksPerCall is 1, or a batch's size.
	ChecksPerCall int
	// Open says the report also measures it at a fixed offered rate (an
	// open loop), for its latency: every ShouldRateLimit server and the
	// native check on Redis with its floor, the rows of the p99 targets
	// and their references.
	Open bool
	// Tuning marks a variant measured to choose a configuration, not one
	// of the report's rows by default.
	Tuning bool
	// Config says how the server is configured, for the report.
	Config string
	// NewDecider returns the decider of one call (and what to close after
	// the run, or nil).
	NewDecider func(c Conn) (d redisbench.Decider, closeFn func(), err error)
}

// Store names where the decisions are made, for the report.
func (im Impl) Store() string {
	if im.Redis {
		return "Redis"
	}
	return "memory"
}

func (im Impl) rules() []byte {
	if im.Rules == nil {
		return RulesYAML()
	}
	return im.Rules
}

// key identifies the server process an implementation runs on: impls with
// the same key share one process.
func (im Impl) key() string {
	sum := sha256.Sum256(im.rules())
	return strings.Join(append([]string{im.Server.String(), im.Store(), hex.EncodeToString(sum[:8])}, im.Env...), " ")
}

// What one call of each kind is, for the report.
const (
	shouldRateLimit = "ShouldRateLimit, one descriptor (user=N)"
	nativeAPI       = "CheckRateLimit, one check (user=N)"
	httpAPI         = "POST " + HTTPCheckPath + " (JSON, key_type user, key_value N), keep-alive"
)

// batchAPI is what one batch call is.
var batchAPI = fmt.Sprintf("CheckRateLimitBatch of %d checks (users N … N+%d, each decided on its own)", BatchSize, BatchSize-1)

func envoyDecider(c Conn) (redisbench.Decider, func(), error) {
	return NewEnvoyDecider(c.GRPC, c.Users), nil, nil
}

// Impls returns every implementation, in report order, TuningImpls last.
// ShouldRateLimit with the same descriptors under the same rules:
// envoyproxy/ratelimit in its default and its best configuration, the
// grpc-go floor, ratelimitd on Redis and on its memory store. Sluice's own
// API under rules in sluice's format: CheckRateLimit of one check (the
// floor, ratelimitd on Redis and memory), CheckRateLimitBatch of BatchSize
// (memory, Redis), the HTTP JSON check (Redis, memory). The remote store
// through ratelimitd on Redis and the Redis store in the app.
func Impls() []Impl {
	native := func(im Impl) Impl {
		im.Server, im.Rules, im.Ready, im.ChecksPerCall = Ratelimitd, NativeRulesYAML(), nativeReady, max(im.ChecksPerCall, 1)
		return im
	}
	out := []Impl{
		{Name: "envoy-ratelimit-default", Server: EnvoyRatelimit, Group: Envoy, Redis: true, API: shouldRateLimit, ChecksPerCall: 1, NewDecider: envoyDecider, Open: true,
			Config: "its defaults, as its README runs it (USE_STATSD=false: stats to stderr)"},
		{Name: "envoy-ratelimit-best", Server: EnvoyRatelimit, Group: Envoy, Redis: true, Env: EnvoyBestEnv, API: shouldRateLimit, ChecksPerCall: 1, NewDecider: envoyDecider, Open: true,
			Config: "its best: " + strings.Join(EnvoyBestEnv, " ")},
		{Name: "grpc-floor", Server: Floor, Group: Envoy, API: shouldRateLimit, ChecksPerCall: 1, NewDecider: envoyDecider, Open: true,
			Config: "a constant OK answer, no work"},
		{Name: "ratelimitd-redis", Server: Ratelimitd, Group: Envoy, Redis: true, API: shouldRateLimit, ChecksPerCall: 1, NewDecider: envoyDecider, Open: true},
		{Name: "ratelimitd-memory", Server: Ratelimitd, Group: Envoy, API: shouldRateLimit, ChecksPerCall: 1, NewDecider: envoyDecider, Open: true},
		{Name: "grpc-floor-native", Server: Floor, Group: Native, Ready: nativeReady, API: nativeAPI, ChecksPerCall: 1, NewDecider: nativeSingle, Open: true,
			Config: "a constant allowed answer, no work"},
		native(Impl{Name: "ratelimitd-redis-native", Group: Native, Redis: true, API: nativeAPI, NewDecider: nativeSingle, Open: true}),
		native(Impl{Name: "ratelimitd-memory-native", Group: Native, API: nativeAPI, NewDecider: nativeSingle}),
		native(Impl{Name: fmt.Sprintf("ratelimitd-memory-batch%d", BatchSize), Group: Batch, API: batchAPI, ChecksPerCall: BatchSize, NewDecider: nativeBatch}),
		native(Impl{Name: fmt.Sprintf("ratelimitd-redis-batch%d", BatchSize), Group: Batch, Redis: true, API: batchAPI, ChecksPerCall: BatchSize, NewDecider: nativeBatch}),
		native(Impl{Name: "ratelimitd-redis-http", Group: HTTP, Redis: true, API: httpAPI, NewDecider: httpDeciderOf}),
		native(Impl{Name: "ratelimitd-memory-http", Group: HTTP, API: httpAPI, NewDecider: httpDeciderOf}),
		native(Impl{Name: "remotestore", Group: Remote, Redis: true, API: StoreLimit.String() + " Take of one op through remotestore (StoreService on one connection) to ratelimitd on Redis", NewDecider: remoteStoreDecider}),
		{Name: "redisstore", Server: InProcess, Group: Remote, Redis: true, API: StoreLimit.String() + " Take of one op, sluice's Redis store in the app (pipelined)", ChecksPerCall: 1, NewDecider: redisStoreDecider},
	}
	return append(out, TuningImpls()...)
}

// TuningImpls are the variants of envoyproxy/ratelimit that chose its best
// configuration (EnvoyBestEnv), each with stats off and one setting of it:
// the local cache off and on, the pipelining windows its README recommends
// (150 and 500 µs) and pool sizes around its default of 10.
func TuningImpls() []Impl {
	variant := func(label string, env ...string) Impl {
		env = append([]string{"DISABLE_STATS=true"}, env...)
		return Impl{Name: "envoy-ratelimit-tune-" + label, Server: EnvoyRatelimit, Group: Envoy, Redis: true, Env: env, API: shouldRateLimit, ChecksPerCall: 1,
			NewDecider: envoyDecider, Tuning: true, Config: strings.Join(env, " ")}
	}
	cache := fmt.Sprintf("LOCAL_CACHE_SIZE_IN_BYTES=%d", EnvoyLocalCacheBytes)
	return []Impl{
		variant("nocache"),
		variant("cache", cache),
		variant("cache-window150us", cache, "REDIS_PIPELINE_WINDOW=150us"),
		variant("cache-window500us", cache, "REDIS_PIPELINE_WINDOW=500us"),
		variant("cache-pool2", cache, "REDIS_POOL_SIZE=2"),
		variant("cache-pool4", cache, "REDIS_POOL_SIZE=4"),
		variant("cache-pool32", cache, "REDIS_POOL_SIZE=32"),
	}
}

// StoreLimit is the limit of the remote store comparison's decisions: a
// token bucket never emptied.
var StoreLimit = core.PerSecond(Rate)

// redisStoreDecider is sluice's Redis store in the load generator's process,
// as the Redis scenario's sluice-token_bucket: a go-redis client with a pool
// for every caller, automatic pipelining, one Take of one op per decision.
func redisStoreDecider(c Conn) (redisbench.Decider, func(), error) {
	client := redisbench.NewClient(c.RedisAddr, c.Callers)
	st, err := redisstore.New(client, redisstore.WithTimeout(time.Second))
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return storeDecider{st}, func() { client.Close() }, nil
}

// storeDecider takes one op of cost 1 under StoreLimit per decision.
type storeDecider struct{ st core.Store }

func (d storeDecider) Decide(ctx context.Context, key string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	ops := [1]core.Op{{Key: core.Key{Identity: key}, Limit: StoreLimit, Cost: 1}}
	var out [1]core.Result
	err := d.st.Take(ctx, ops[:], out[:])
	return out[0].Allowed, err
}
