package envoyrls_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/envoyrls"
	"github.com/sluicehq/sluice/service/rules"
)

// TestStoreFailureNeverLeaks: on a real Redis, decisions work; with the
// Redis process killed, ShouldRateLimit answers UNAVAILABLE and /json 500,
// both with a generic message, and the cause goes to the log only.
func TestStoreFailureNeverLeaks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	redis := redistest.StartServer(t)
	// The tests' explicit clock (t0): the four requests fall in one of the
	// rule's one-second windows, which on Redis TIME they straddled now and
	// then (the fourth was then admitted).
	st, err := redisstore.New(redis.Client(t), redisstore.WithClock(newClock(t0).now), redisstore.WithTimeout(time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	e, err := engine.New(ctx, st, rules.NewFile(enRules(t)))
	require.NoError(t, err)
	var logs bytes.Buffer
	srv := envoyrls.New(e, envoyrls.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	g := grpc.NewServer()
	srv.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	client := rlsv3.NewRateLimitServiceClient(conn)
	hs := httptest.NewServer(srv.JSONHandler())
	t.Cleanup(hs.Close)

	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{
		desc("remote_address", "10.8.8.8"), desc("path", "/api", "user", "u"),
	}}
	for i := range 3 {
		res, err := client.ShouldRateLimit(ctx, req)
		require.NoError(t, err)
		require.Equal(t, rlsv3.RateLimitResponse_OK, res.GetOverallCode())
		require.Equal(t, uint32(4-i), res.GetStatuses()[0].GetLimitRemaining())
	}
	res, err := client.ShouldRateLimit(ctx, req)
	require.NoError(t, err)
	require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, res.GetOverallCode(), "api-user: 3 per second")

	redis.Kill()
	leaks := []string{redis.Addr, "refused", "dial", "redis", "EOF", "connection"}
	for range 3 {
		_, err := client.ShouldRateLimit(ctx, req)
		require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
		msg := status.Convert(err).Message()
		require.Equal(t, "rate limit decision unavailable", msg)
		r := postJSON(t, hs.URL, http.MethodPost, `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.8.8.8"}]}]}`)
		require.Equal(t, http.StatusInternalServerError, r.status)
		p := problemOf(t, r)
		for _, leak := range leaks {
			require.NotContains(t, strings.ToLower(string(r.raw)), strings.ToLower(leak))
		}
		require.Equal(t, "the rate limit decision could not be made", p["detail"])
	}
	require.Contains(t, logs.String(), "envoyrls: deciding descriptors failed", "the cause is logged")
}
