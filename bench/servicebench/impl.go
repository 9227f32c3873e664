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
)

func (s Server) String() string {
	switch s {
	case EnvoyRatelimit:
		return "envoyproxy/ratelimit"
	case Ratelimitd:
		return "ratelimitd"
	}
	return "none (in the load generator)"
}

// Group is the table of the report an implementation belongs to.
type Group uint8

const (
	// Envoy: ShouldRateLimit, the comparison with envoyproxy/ratelimit.
	Envoy Group = iota
	// Native: ratelimitd's own API on its memory store.
	Native
	// Remote: the remote store against sluice's Redis store.
	Remote
)

// Conn is what a decider is built on.
type Conn struct {
	// GRPC are the connections to the server (none for InProcess).
	GRPC []*grpc.ClientConn
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

const shouldRateLimit = "ShouldRateLimit, one descriptor (user=N)"

func envoyDecider(c Conn) (redisbench.Decider, func(), error) {
	return NewEnvoyDecider(c.GRPC, c.Users), nil, nil
}

// Impls returns every implementation, in report order: envoyproxy/ratelimit
// on Redis (as the issue runs it, then with the write buffering its README
// recommends for throughput, REDIS_PIPELINE_WINDOW=150us), then ratelimitd
// on Redis and on its memory store, all answering ShouldRateLimit with the
// same descriptors under the same rules; ratelimitd's native API on its
// memory store, single checks and batches; the remote store through
// ratelimitd on Redis and the Redis store in the app.
func Impls() []Impl {
	return []Impl{
		{Name: "envoy-ratelimit", Server: EnvoyRatelimit, Group: Envoy, Redis: true, API: shouldRateLimit, ChecksPerCall: 1, NewDecider: envoyDecider},
		{Name: "envoy-ratelimit-window", Server: EnvoyRatelimit, Group: Envoy, Redis: true, Env: []string{"REDIS_PIPELINE_WINDOW=150us"},
			API: shouldRateLimit, ChecksPerCall: 1, NewDecider: envoyDecider},
		{Name: "ratelimitd-redis", Server: Ratelimitd, Group: Envoy, Redis: true, API: shouldRateLimit, ChecksPerCall: 1, NewDecider: envoyDecider},
		{Name: "ratelimitd-memory", Server: Ratelimitd, Group: Envoy, API: shouldRateLimit, ChecksPerCall: 1, NewDecider: envoyDecider},
		{Name: "ratelimitd-memory-native", Server: Ratelimitd, Group: Native, Rules: NativeRulesYAML(), Ready: nativeReady,
			API: "CheckRateLimit, one check (user=N)", ChecksPerCall: 1, NewDecider: nativeSingle},
		{Name: "ratelimitd-memory-batch10", Server: Ratelimitd, Group: Native, Rules: NativeRulesYAML(), Ready: nativeReady,
			API: fmt.Sprintf("CheckRateLimitBatch of %d checks (users N … N+%d, each decided on its own)", BatchSize, BatchSize-1), ChecksPerCall: BatchSize, NewDecider: nativeBatch},
		{Name: "remotestore", Server: Ratelimitd, Group: Remote, Redis: true, Rules: NativeRulesYAML(), Ready: nativeReady, API: StoreLimit.String() + " Take of one op through remotestore (StoreService on one connection) to ratelimitd on Redis", ChecksPerCall: 1, NewDecider: remoteStoreDecider},
		{Name: "redisstore", Server: InProcess, Group: Remote, Redis: true, API: StoreLimit.String() + " Take of one op, sluice's Redis store in the app (pipelined)", ChecksPerCall: 1, NewDecider: redisStoreDecider},
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
