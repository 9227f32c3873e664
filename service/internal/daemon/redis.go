package daemon

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// redisKind is the deployment a --redis address names.
type redisKind int

const (
	redisSingle redisKind = iota
	redisSentinel
	redisCluster
)

func (k redisKind) String() string {
	switch k {
	case redisSentinel:
		return "sentinel"
	case redisCluster:
		return "cluster"
	}
	return "single"
}

// redisTarget is a parsed --redis address.
type redisTarget struct {
	Kind   redisKind
	Addrs  []string // one for a single node; the sentinels; the cluster's seed nodes
	Master string   // Sentinel: the monitored master's name
	DB     int
	TLS    bool
}

// parseRedis reads a --redis address:
//
//	host:port                              one node (as redis://host:port)
//	redis://host:port[/db]                 one node
//	redis-sentinel://MASTER@h1:p1,h2:p2[/db]  the master MASTER, found through these sentinels
//	redis-cluster://h1:p1,h2:p2            a Redis Cluster, from these seed nodes
//
// The schemes rediss://, rediss-sentinel:// and rediss-cluster:// connect
// over TLS. The password is not part of the address (--redis-password).
func parseRedis(s string) (redisTarget, error) {
	var t redisTarget
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		scheme, rest = "redis", s
	}
	if strings.HasPrefix(scheme, "rediss") {
		t.TLS, scheme = true, "redis"+strings.TrimPrefix(scheme, "rediss")
	}
	switch scheme {
	case "redis":
		t.Kind = redisSingle
	case "redis-sentinel":
		t.Kind = redisSentinel
		master, hosts, ok := strings.Cut(rest, "@")
		if !ok || master == "" {
			return t, fmt.Errorf("%q: want redis-sentinel://MASTER@host:port,host:port", s)
		}
		t.Master, rest = master, hosts
	case "redis-cluster":
		t.Kind = redisCluster
	default:
		return t, fmt.Errorf("%q: unknown scheme %q (want redis, redis-sentinel or redis-cluster, or rediss... for TLS)", s, scheme)
	}
	hosts, db, hasDB := strings.Cut(rest, "/")
	if hasDB && db != "" {
		if t.Kind == redisCluster {
			return t, fmt.Errorf("%q: a cluster has no database number", s)
		}
		n, err := strconv.Atoi(db)
		if err != nil || n < 0 {
			return t, fmt.Errorf("%q: database %q: want a number >= 0", s, db)
		}
		t.DB = n
	}
	for h := range strings.SplitSeq(hosts, ",") {
		host, port, err := net.SplitHostPort(h)
		if err != nil || host == "" || port == "" {
			return t, fmt.Errorf("%q: address %q: want host:port", s, h)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return t, fmt.Errorf("%q: address %q: bad port", s, h)
		}
		t.Addrs = append(t.Addrs, h)
	}
	if len(t.Addrs) == 0 {
		return t, errors.New("no address")
	}
	if t.Kind == redisSingle && len(t.Addrs) > 1 {
		return t, fmt.Errorf("%q: one address for a single node (redis-cluster:// or redis-sentinel:// for several)", s)
	}
	return t, nil
}

// client returns a go-redis client for t. Retries are off and context
// deadlines honoured: the guard decides what a failure means, and a refused
// connection must fail at once, not be retried past the store timeout.
func (t redisTarget) client(password string) redis.UniversalClient {
	var tc *tls.Config
	if t.TLS {
		tc = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	switch t.Kind {
	case redisSentinel:
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: t.Master, SentinelAddrs: t.Addrs, Password: password, DB: t.DB, TLSConfig: tc,
			ContextTimeoutEnabled: true, MaxRetries: -1,
		})
	case redisCluster:
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: t.Addrs, Password: password, TLSConfig: tc,
			ContextTimeoutEnabled: true, MaxRetries: -1,
		})
	}
	return redis.NewClient(&redis.Options{
		Addr: t.Addrs[0], Password: password, DB: t.DB, TLSConfig: tc,
		ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1,
	})
}
