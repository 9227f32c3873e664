package attack

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/internal/ratelimitdtest"
)

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// ratelimitd builds the binary once per test binary (only for the tests
// that run the process).
func ratelimitd(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ratelimitd-attack-")
		if err != nil {
			buildErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		binary, buildErr = ratelimitdtest.Build(ctx, "../../cmd/ratelimitd", dir)
	})
	require.NoError(t, buildErr)
	t.Cleanup(func() {}) // the binary's directory is left to the OS temp cleaner: tests share it
	return binary
}

// TestAttackProcessDenyRule: an envoyproxy/ratelimit file banning a value
// with requests_per_unit: 0 (its own README's example) passes `ratelimitd
// validate` and is served by `ratelimitd serve`: the banned value is
// OVER_LIMIT and, all or nothing, the request's other descriptor is not
// charged.
func TestAttackProcessDenyRule(t *testing.T) {
	bin := ratelimitd(t)
	path := filepath.Join(t.TempDir(), "envoy.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: hour
      requests_per_unit: 5
  - key: remote_address
    value: 10.6.6.6
    rate_limit:
      unit: hour
      requests_per_unit: 0
  - key: path
    rate_limit:
      unit: hour
      requests_per_unit: 5
`), 0o600))
	out, err := exec.Command(bin, "validate", path).CombinedOutput()
	require.NoError(t, err, "%s", out)

	p := ratelimitdtest.Start(t, bin, nil, "--rules", path)
	c := rlsv3.NewRateLimitServiceClient(p.Conn(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := func(addr string) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "path", Value: "/x"}}},
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: addr}}},
		}}
	}
	for range 3 {
		r, err := c.ShouldRateLimit(ctx, req("10.6.6.6"))
		require.NoError(t, err)
		require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, r.GetOverallCode())
		require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, r.GetStatuses()[1].GetCode())
	}
	r, err := c.ShouldRateLimit(ctx, req("10.1.1.1"))
	require.NoError(t, err)
	require.Equal(t, rlsv3.RateLimitResponse_OK, r.GetOverallCode())
	require.Equal(t, uint32(4), r.GetStatuses()[0].GetLimitRemaining(), "the banned requests charged the path")
}
