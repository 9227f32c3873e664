package remotestore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/service/remotestore"
)

// benchKeys is how many identities a benchmark spreads its takes over.
const benchKeys = 1024

// benchTake runs one-op Takes of 1 unit on s, serially and from parallel
// goroutines, over benchKeys identities under a limit they never reach.
func benchTake(b *testing.B, s core.Store) {
	keys := make([]core.Key, benchKeys)
	for i := range keys {
		keys[i] = core.Key{Identity: "bench-" + strconv.Itoa(i), Policy: "per-user"}
	}
	l := core.Per(1_000_000_000, time.Second)
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		ops := make([]core.Op, 1)
		out := make([]core.Result, 1)
		i := 0
		for b.Loop() {
			ops[0] = core.Op{Key: keys[i%benchKeys], Limit: l, Cost: 1}
			i++
			if err := s.Take(ctx, ops, out); err != nil || !out[0].Allowed {
				b.Fatal(err, out[0])
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(16) // callers per core: a server's concurrent requests
		var next atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			ops := make([]core.Op, 1)
			out := make([]core.Result, 1)
			i := int(next.Add(97))
			for pb.Next() {
				ops[0] = core.Op{Key: keys[i%benchKeys], Limit: l, Cost: 1}
				i++
				if err := s.Take(ctx, ops, out); err != nil || !out[0].Allowed {
					b.Error(err, out[0])
					return
				}
			}
		})
	})
}

// BenchmarkRemoteTake measures the remote store's overhead per decision
// against the Redis store's, in the same run on the same redis-server:
// "redis" is the Redis store called in process (the middleware's usual
// backend), "remote" the remote store calling a StoreService (a separate
// process, as ratelimitd is) that decides on a Redis store on that same
// server; "remote-unbatched" the same without coalescing concurrent Takes
// into TakeBatch RPCs. Allocations are the caller's process's only.
func BenchmarkRemoteTake(b *testing.B) {
	srv := redistest.StartServer(b)
	rs, err := redisstore.New(srv.Client(b), redisstore.WithTimeout(5*time.Second))
	require.NoError(b, err)
	b.Cleanup(func() { rs.Close() })
	b.Run("redis", func(b *testing.B) { benchTake(b, rs) })

	addr := serveProcess(b, srv.Addr)
	b.Run("remote", func(b *testing.B) { benchTake(b, remotestore.New(dial(b, addr))) })
	b.Run("remote-unbatched", func(b *testing.B) {
		benchTake(b, remotestore.New(dial(b, addr), remotestore.WithBatching(0, 0)))
	})
}

// BenchmarkRemoteTakeMemory is the remote store on a StoreService on a
// memory store, in process: the cost of the gRPC round trip itself
// (client, server and the decision, in one process's allocations).
func BenchmarkRemoteTakeMemory(b *testing.B) {
	s, _ := remote(b, memory(b, nil))
	benchTake(b, s)
}
