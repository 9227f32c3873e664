package config_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

func TestFailureSectionBuildsTheGuard(t *testing.T) {
	f, err := config.ParseFile("limits.yaml", []byte(`
failure:
  mode: fallback
  instances: 3
  timeout: 4ms
  breaker: {failures: 2, cooldown: 250ms}
  deny_cache: {max_keys: 1000, max_ttl: 5s}
policies:
  - {name: api, key: "header:X-Key", limit: 9, window_seconds: 60}
`))
	require.NoError(t, err)
	require.Len(t, f.Policies, 1)
	backend, err := memorystore.New()
	require.NoError(t, err)
	require.NoError(t, backend.Close()) // a backend that fails
	g, err := guard.New(backend, append(f.Guard, guard.WithLogger(slog.New(slog.DiscardHandler)))...)
	require.NoError(t, err)
	defer g.Close()
	require.Equal(t, guard.ModeFallback, g.Mode())
	lim, err := core.NewLimiter(g, f.Policies)
	require.NoError(t, err)
	req := keyfunc.Static{Headers: map[string][]string{"X-Key": {"a"}}}
	allowed := 0
	for range 10 {
		d, err := lim.Check(context.Background(), req)
		require.NoError(t, err)
		require.True(t, d.Degraded())
		if d.Allowed {
			allowed++
		}
	}
	require.Equal(t, 3, allowed, "9 per minute over 3 instances")
	require.Equal(t, guard.Open, g.Circuit(), "two failures open the breaker")
	require.Equal(t, uint64(2), g.Stats().Failures)

	f, err = config.ParseFile("x.yaml", []byte("failure: {mode: closed, retry_after: 2s}\npolicies: [{name: a, key: ip, limit: 1, window_seconds: 1}]\n"))
	require.NoError(t, err)
	g, err = guard.New(backend, f.Guard...)
	require.NoError(t, err)
	out := make([]core.Result, 1)
	require.NoError(t, g.Take(context.Background(), []core.Op{{Key: core.Key{Identity: "k", Policy: "a"}, Limit: core.PerSecond(1), Cost: 1}}, out))
	require.Equal(t, core.FailedClosed, out[0].Source)
	require.Equal(t, 2*time.Second, out[0].RetryAfter)

	f, err = config.ParseFile("x.yaml", []byte("policies: [{name: a, key: ip, limit: 1, window_seconds: 1}]\n"))
	require.NoError(t, err)
	require.Nil(t, f.Guard)
}

func TestFailureSectionErrors(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"failure: {mode: sideways}", "x.yaml:1: failure.mode: must be open, closed or fallback"},
		{"failure: {mode: fallback}", "failure.instances: required with mode: fallback"},
		{"failure: {mode: fallback, instances: 0}", "failure.instances: must be a whole number >= 1"},
		{"failure: {mode: open, instances: 2}", "failure.instances: only with mode: fallback"},
		{"failure: {mode: open, retry_after: 1s}", "failure.retry_after: only with mode: closed"},
		{"failure: {timeout: soon}", "failure.timeout: must be a positive duration"},
		{"failure: {breaker: {failures: 0}}", "failure.breaker.failures: must be a whole number >= 1"},
		{"failure: {breaker: {cooldown: -1s}}", "failure.breaker.cooldown: must be a positive duration"},
		{"failure: {deny_cache: {max_ttl: 1s}}", "failure.deny_cache.max_keys: required"},
		{"failure: {deny_cache: {max_keys: many}}", "failure.deny_cache.max_keys: must be a whole number"},
		{"failure: {retries: 3}", "failure.retries: unknown field"},
	}
	for _, c := range cases {
		_, err := config.ParseFile("x.yaml", []byte(c.yaml+"\npolicies: [{name: a, key: ip, limit: 1, window_seconds: 1}]\n"))
		require.ErrorContains(t, err, c.want, c.yaml)
	}
}
