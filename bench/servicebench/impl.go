package servicebench

import (
	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/bench/redisbench"
)

// Server says which program an implementation runs.
type Server uint8

const (
	// EnvoyRatelimit is envoyproxy/ratelimit's server, on Redis.
	EnvoyRatelimit Server = iota
	// Ratelimitd is sluice's service.
	Ratelimitd
)

func (s Server) String() string {
	if s == EnvoyRatelimit {
		return "envoyproxy/ratelimit"
	}
	return "ratelimitd"
}

// Impl is one server configuration and one kind of call under comparison.
type Impl struct {
	// Name is the -impls and sub-benchmark name.
	Name   string
	Server Server
	// Redis says the server decides on the shared redis-server; false is
	// ratelimitd's memory store.
	Redis bool
	// Env is added to envoyproxy/ratelimit's environment.
	Env []string
	// API is what one call is, for the report.
	API string
	// ChecksPerCall is 1, or a batch's size.
	ChecksPerCall int
	// NewDecider returns the decider of one call over conns, for users.
	NewDecider func(conns []*grpc.ClientConn, users []string) redisbench.Decider
}

// Store names the server's store, for the report.
func (im Impl) Store() string {
	if im.Redis {
		return "Redis"
	}
	return "memory"
}

// key identifies the server process an implementation runs on: impls with
// the same key share one process.
func (im Impl) key() string {
	k := im.Server.String() + "/" + im.Store()
	for _, e := range im.Env {
		k += " " + e
	}
	return k
}

const shouldRateLimit = "ShouldRateLimit, one descriptor (user=N)"

// Impls returns every implementation, in report order: envoyproxy/ratelimit
// on Redis, then ratelimitd on Redis and on its memory store, all answering
// ShouldRateLimit with the same descriptors under the same rules.
func Impls() []Impl {
	return []Impl{
		{Name: "envoy-ratelimit", Server: EnvoyRatelimit, Redis: true, API: shouldRateLimit, ChecksPerCall: 1, NewDecider: NewEnvoyDecider},
		{Name: "ratelimitd-redis", Server: Ratelimitd, Redis: true, API: shouldRateLimit, ChecksPerCall: 1, NewDecider: NewEnvoyDecider},
		{Name: "ratelimitd-memory", Server: Ratelimitd, API: shouldRateLimit, ChecksPerCall: 1, NewDecider: NewEnvoyDecider},
	}
}
