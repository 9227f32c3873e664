package daemon

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBatchParallelism: --batch-parallelism 0 is 1 on the memory store (a
// batch's checks decided in order) and 16 over Redis (pipelined).
func TestBatchParallelism(t *testing.T) {
	c := Defaults()
	require.NoError(t, c.Validate())
	require.Equal(t, 1, c.batchParallelism(), "batches in order in memory")
	c.Redis = "127.0.0.1:6379"
	require.Equal(t, 16, c.batchParallelism(), "pipelined to Redis")
	c.BatchParallelism = 3
	require.Equal(t, 3, c.batchParallelism())
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
