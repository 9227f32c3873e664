package daemon_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/service/internal/ratelimitdtest"
	"github.com/sluicehq/sluice/service/ratelimitv1"
)

// ratelimitd on Redis (its store the lease layer over the guard over the
// Redis store) decides a CheckRateLimitBatch of 100 distinct callers in
// one FCALL, as the engine does on the Redis store alone: the lease layer
// passes the takes without a lease down together.
func TestBatchOnRedisIsOneCall(t *testing.T) {
	srv := redistest.StartServer(t)
	file := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(file, []byte("rules:\n  - {name: per-user, dimension: user, algorithm: fixed_window, limit: 10, window_seconds: 3600}\n"), 0o644))
	c, err := ratelimitdtest.Config("--rules", file, "--redis", srv.Addr, "--failure-mode", "closed", "--store-timeout", "5s")
	require.NoError(t, err)
	d := ratelimitdtest.StartDaemon(t, c)
	client := ratelimitv1.NewRateLimitServiceClient(d.Conn(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rc.Close() })

	batch := func(prefix string) *ratelimitv1.BatchRequest {
		req := &ratelimitv1.BatchRequest{}
		for i := range 100 {
			req.Checks = append(req.Checks, &ratelimitv1.CheckRequest{Dimension: "user", Identifier: prefix + strconv.Itoa(i)})
		}
		return req
	}
	_, err = client.CheckRateLimitBatch(ctx, batch("warm-")) // loads the code
	require.NoError(t, err)
	before := redistest.CommandCalls(t, rc, "fcall")
	resp, err := client.CheckRateLimitBatch(ctx, batch("u-"))
	require.NoError(t, err)
	require.Equal(t, before+1, redistest.CommandCalls(t, rc, "fcall"), "one FCALL for a batch of 100 callers")
	require.Len(t, resp.GetResults(), 100)
	for i, r := range resp.GetResults() {
		require.True(t, r.GetResponse().GetAllowed(), "check %d", i)
		require.EqualValues(t, 9, r.GetResponse().GetRemaining(), "check %d", i)
	}
}
