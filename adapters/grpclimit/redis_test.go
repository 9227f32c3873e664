package grpclimit_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/adapters/grpclimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestRedisSharedLimit: two gRPC servers, each with its own redisstore.Store
// and go-redis client, share one real redis-server and enforce one limit
// together: 5 per client IP across both.
func TestRedisSharedLimit(t *testing.T) {
	rs := redistest.StartServer(t)
	var servers []*server
	for range 2 {
		store, err := redisstore.New(rs.Client(t), redisstore.WithTimeout(10*time.Second)) // not about Redis's latency: this machine may stall
		require.NoError(t, err)
		t.Cleanup(func() { _ = store.Close() })
		lim := newLimiter(t, store, "shared", core.PerHour(5), nil)
		servers = append(servers, serve(t, tcpTransport, []grpc.ServerOption{grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(lim))}))
	}
	got := map[codes.Code]int{}
	perServer := [2]int{}
	for i := range 12 {
		s := servers[i%2]
		r := s.unary(t, t.Context(), methodUnary)
		got[status.Code(r.err)]++
		if r.err == nil {
			perServer[i%2]++
			require.Len(t, r.header.Get("x-ratelimit-remaining"), 1)
		} else {
			denial(t, r.err)
			require.Equal(t, []string{"0"}, r.trailer.Get("x-ratelimit-remaining"))
		}
	}
	require.Equal(t, map[codes.Code]int{codes.OK: 5, codes.ResourceExhausted: 7}, got)
	require.Equal(t, [2]int{3, 2}, perServer, "both servers admitted calls from the one shared budget")
}
