package remotestore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/service/remotestore"
)

// Over real gRPC on loopback, on a server backed by the memory store, the
// remote store passes the conformance suite every store passes: the same
// decisions, errors, groups, refunds, overrides and bookings as the
// server's store itself.
func TestConformanceMemory(t *testing.T) {
	limitertest.Run(t, func(t *testing.T, clock func() time.Time) core.Store {
		s, _ := remote(t, memory(t, clock))
		return s
	})
}

// Without batching every Take is its own RPC: the same suite.
func TestConformanceUnbatched(t *testing.T) {
	limitertest.Run(t, func(t *testing.T, clock func() time.Time) core.Store {
		srv := serve(t, memory(t, clock), "127.0.0.1:0")
		return remotestore.New(dial(t, srv.addr), remotestore.WithBatching(0, 0))
	})
}

// The same on a server backed by the Redis store (a real redis-server).
func TestConformanceRedis(t *testing.T) {
	client := redistest.StartServer(t).Client(t)
	limitertest.Run(t, func(t *testing.T, clock func() time.Time) core.Store {
		rs, err := redisstore.New(client, redisstore.WithClock(clock), redisstore.WithTimeout(10*time.Second))
		require.NoError(t, err)
		t.Cleanup(func() { rs.Close() })
		s, _ := remote(t, rs)
		return s
	})
}
