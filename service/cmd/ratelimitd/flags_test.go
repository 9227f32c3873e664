package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func envMap(m map[string]string) lookupEnv {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestFlagsEnvironmentAndPrecedence(t *testing.T) {
	var c serveConfig
	fs := newServeFlags(&c)
	_, err := parseFlags(fs, []string{"--grpc-addr", "127.0.0.1:9001"}, servePrefix, envMap(map[string]string{
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
	require.NoError(t, c.validate())
}

func TestFlagsDefaults(t *testing.T) {
	var c serveConfig
	_, err := parseFlags(newServeFlags(&c), nil, servePrefix, envMap(nil))
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:8081", c.GRPCAddr)
	require.Equal(t, "127.0.0.1:8080", c.HTTPAddr)
	require.Empty(t, c.Redis, "the memory store by default")
	require.Empty(t, c.Rules, "the bundled rules by default")
	require.Equal(t, "open", c.FailureMode)
	require.Equal(t, defaultStreamWorkers, c.StreamWorkers, "calls served by long-lived goroutines")
	require.NoError(t, c.validate())
	require.Equal(t, 1, c.batchParallelism(), "batches in order in memory")
	c.Redis = "127.0.0.1:6379"
	require.Equal(t, 16, c.batchParallelism(), "pipelined to Redis")
}

func TestFlagsBadValuesNameTheirSource(t *testing.T) {
	var c serveConfig
	_, err := parseFlags(newServeFlags(&c), nil, servePrefix, envMap(map[string]string{"RATELIMITD_STORE_TIMEOUT": "soon"}))
	require.ErrorContains(t, err, "RATELIMITD_STORE_TIMEOUT")

	c = serveConfig{}
	_, err = parseFlags(newServeFlags(&c), []string{"--failure-mode", "maybe", "--fallback-instances", "0",
		"--tls-cert", "x.pem", "--log-level", "loud", "--redis", "mongodb://x:1"}, servePrefix, envMap(nil))
	require.NoError(t, err)
	err = c.validate()
	for _, want := range []string{"--failure-mode", "--fallback-instances", "--tls-cert, --tls-key", "--log-level", "--redis"} {
		require.ErrorContains(t, err, want)
	}

	c = serveConfig{}
	_, err = parseFlags(newServeFlags(&c), []string{"--rules-poll", "0s", "--idempotency-ttl", "10ms", "--idempotency-repeats", "0",
		"--max-client-skew", "0s", "--max-batch", "0", "--batch-parallelism", "-1", "--memory-max-keys", "0", "--shutdown-timeout", "0s", "--grpc-stream-workers", "-1"}, servePrefix, envMap(nil))
	require.NoError(t, err)
	err = c.validate()
	for _, want := range []string{"--rules-poll", "--idempotency-ttl", "--idempotency-repeats", "--max-client-skew", "--max-batch",
		"--batch-parallelism", "--memory-max-keys", "--shutdown-timeout", "--grpc-stream-workers"} {
		require.ErrorContains(t, err, want)
	}
}

func TestParseRedis(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want redisTarget
	}{
		{"127.0.0.1:6379", redisTarget{Kind: redisSingle, Addrs: []string{"127.0.0.1:6379"}}},
		{"redis://h:6380/2", redisTarget{Kind: redisSingle, Addrs: []string{"h:6380"}, DB: 2}},
		{"rediss://h:6380", redisTarget{Kind: redisSingle, Addrs: []string{"h:6380"}, TLS: true}},
		{"redis-sentinel://mymaster@a:26379,b:26379", redisTarget{Kind: redisSentinel, Master: "mymaster", Addrs: []string{"a:26379", "b:26379"}}},
		{"redis-cluster://a:7000,b:7001,c:7002", redisTarget{Kind: redisCluster, Addrs: []string{"a:7000", "b:7001", "c:7002"}}},
		{"rediss-cluster://a:7000", redisTarget{Kind: redisCluster, Addrs: []string{"a:7000"}, TLS: true}},
	} {
		got, err := parseRedis(tc.in)
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
	for _, bad := range []string{"", "localhost", "redis://a:1,b:2", "redis-sentinel://a:1", "redis-sentinel://@a:1",
		"redis-cluster://a:1/3", "redis://a:0", "redis://a:1/x", "memcached://a:1", "redis://:1"} {
		_, err := parseRedis(bad)
		require.Error(t, err, bad)
	}
}
