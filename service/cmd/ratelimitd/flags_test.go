package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/internal/daemon"
)

func envMap(m map[string]string) lookupEnv {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestFlagsEnvironmentAndPrecedence(t *testing.T) {
	t.Parallel()
	_, c, err := parseServe([]string{"--grpc-addr", "127.0.0.1:9001"}, envMap(map[string]string{
		"RATELIMITD_GRPC_ADDR":     "127.0.0.1:9999", // the flag wins
		"RATELIMITD_HTTP_ADDR":     "127.0.0.1:9002",
		"RATELIMITD_STORE_TIMEOUT": "7ms",
		"RATELIMITD_FAILURE_MODE":  "closed",
		"RATELIMITD_REDIS":         "redis-cluster://127.0.0.1:7000,127.0.0.1:7001",
	}))
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:9001", c.GRPCAddr)
	require.Equal(t, "127.0.0.1:9002", c.HTTPAddr)
	require.Equal(t, 7*time.Millisecond, c.StoreTimeout)
	require.Equal(t, "closed", c.FailureMode)
}

func TestFlagsDefaults(t *testing.T) {
	t.Parallel()
	_, c, err := parseServe(nil, envMap(nil))
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:8081", c.GRPCAddr)
	require.Equal(t, "127.0.0.1:8080", c.HTTPAddr)
	require.Empty(t, c.Redis, "the memory store by default")
	require.Empty(t, c.Rules, "the bundled rules by default")
	require.Equal(t, "open", c.FailureMode)
	require.Equal(t, daemon.DefaultStreamWorkers, c.StreamWorkers, "calls served by long-lived goroutines")
	require.Equal(t, daemon.Defaults(), c, "serve's defaults are the daemon's")
}

func TestFlagsBadValuesNameTheirSource(t *testing.T) {
	t.Parallel()
	_, _, err := parseServe(nil, envMap(map[string]string{"RATELIMITD_STORE_TIMEOUT": "soon"}))
	require.ErrorContains(t, err, "RATELIMITD_STORE_TIMEOUT")

	_, _, err = parseServe([]string{"--failure-mode", "maybe", "--fallback-instances", "0",
		"--tls-cert", "x.pem", "--log-level", "loud", "--redis", "mongodb://x:1"}, envMap(nil))
	for _, want := range []string{"--failure-mode", "--fallback-instances", "--tls-cert, --tls-key", "--log-level", "--redis"} {
		require.ErrorContains(t, err, want)
	}

	_, _, err = parseServe([]string{"--rules-poll", "0s", "--idempotency-ttl", "10ms", "--idempotency-repeats", "0",
		"--max-client-skew", "0s", "--max-batch", "0", "--batch-parallelism", "-1", "--memory-max-keys", "0", "--shutdown-timeout", "0s", "--grpc-stream-workers", "-1"}, envMap(nil))
	for _, want := range []string{"--rules-poll", "--idempotency-ttl", "--idempotency-repeats", "--max-client-skew", "--max-batch",
		"--batch-parallelism", "--memory-max-keys", "--shutdown-timeout", "--grpc-stream-workers"} {
		require.ErrorContains(t, err, want)
	}
}
