// Package demo holds what the example servers share: the store (Redis at
// $REDIS_ADDR when set, memory otherwise), the listen address ($ADDR), and
// the limits of their common contract, so each example's main shows only how
// its framework installs sluice.
package demo

import (
	"log"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/keyfunc"
)

// Store opens the store of the examples and names it for the log; close it
// with the returned func. Redis is used through a guard (package
// core/guard): while it is down each instance enforces the limits locally,
// and a client flooding past its limit is answered from the deny cache.
func Store() (store core.Store, name string, closeFn func()) {
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		client := redis.NewClient(&redis.Options{
			Addr:                  addr,
			ContextTimeoutEnabled: true,
			// The guard decides what a failure means: let a refused
			// connection fail at once instead of being retried until the
			// timeout.
			MaxRetries:    -1,
			DialerRetries: 1,
		})
		rs, err := redisstore.New(client)
		if err != nil {
			log.Fatal(err)
		}
		g, err := guard.New(rs, guard.WithFallback(1), guard.WithDenyCache(guard.DenyCache{MaxKeys: 100_000}))
		if err != nil {
			log.Fatal(err)
		}
		return g, "redis at " + addr, func() { g.Close(); rs.Close(); client.Close() }
	}
	s, err := memorystore.New()
	if err != nil {
		log.Fatal(err)
	}
	return s, "memory", func() { s.Close() }
}

// Addr returns $ADDR, or def.
func Addr(def string) string {
	if a := os.Getenv("ADDR"); a != "" {
		return a
	}
	return def
}

// Limiter returns a limiter of one policy: limit per client IP (the
// transport peer; behind a proxy, use keyfunc.TrustProxies).
func Limiter(store core.Store, name string, limit core.Limit) *core.Limiter {
	clientIP := keyfunc.IP()
	l, err := core.NewLimiter(store, []core.Policy{{Name: name, Key: clientIP, Limit: limit}})
	if err != nil {
		log.Fatal(err)
	}
	return l
}

// HelloAndLogin returns the limiters of the HTTP examples' contract: /hello
// allows 10 requests per minute per client IP (token bucket, burst 10),
// /login a stricter 3.
func HelloAndLogin(store core.Store) (hello, login *core.Limiter) {
	return Limiter(store, "hello", core.PerMinute(10)), Limiter(store, "login", core.PerMinute(3))
}
