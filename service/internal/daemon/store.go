package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/lease"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
)

// storeSet is the store the engine decides on, with what the daemon needs
// around it.
type storeSet struct {
	store core.Store
	// name says which store it is, for the log: "memory" or "redis
	// (single) at ...".
	name string
	// ping checks that the backend answers (nil for the memory store,
	// always reachable); the readiness loop calls it.
	ping func(ctx context.Context) error
	// guard is the guard around Redis, nil for the memory store.
	guard *guard.Store
	// redis is the Redis client, nil for the memory store (the admin
	// page's fleet figures are published through it).
	redis redis.UniversalClient
	close func()
}

// openStore builds the store of c: the memory store, or the Redis store
// behind the guard (timeout, breaker, failure mode, deny cache) under the
// lease layer, which decides the rules with a lease_seconds in memory from
// blocks of Redis's units (the memory store decides every rule in memory
// already: it has no lease layer). obs
// observes the guard's circuit and failures. It contacts nothing: Redis is
// reached on first use, so ratelimitd starts while Redis is down (and
// answers by the failure mode). now, when not nil, is the memory store's
// clock (fallback mode's local limiter's too).
func openStore(c *Config, log *slog.Logger, obs guard.Observer, now func() time.Time) (*storeSet, error) {
	memOpts := []memorystore.Option{memorystore.WithMaxKeys(c.MemoryMaxKeys)}
	if now != nil {
		memOpts = append(memOpts, memorystore.WithClock(now))
	}
	if c.Redis == "" {
		s, err := memorystore.New(memOpts...)
		if err != nil {
			return nil, fmt.Errorf("memory store: %w", err)
		}
		return &storeSet{store: s, name: "memory", close: func() { _ = s.Close() }}, nil
	}
	t, err := parseRedis(c.Redis)
	if err != nil {
		return nil, fmt.Errorf("--redis: %w", err)
	}
	client := t.client(c.RedisPassword)
	// The store's own bound is --store-timeout too: its default (50 ms)
	// would otherwise cut a call the guard still waits for.
	rs, err := redisstore.New(client, redisstore.WithPrefix(c.RedisPrefix), redisstore.WithTimeout(c.StoreTimeout), redisstore.WithLogger(log))
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("redis store: %w", err)
	}
	opts := []guard.Option{guard.WithTimeout(c.StoreTimeout), guard.WithLogger(log)}
	switch c.FailureMode {
	case "open":
		opts = append(opts, guard.WithFailOpen())
	case "closed":
		opts = append(opts, guard.WithFailClosed(0))
	case "fallback":
		opts = append(opts, guard.WithFallback(c.FallbackInstances, memOpts...))
	}
	if c.DenyCacheKeys > 0 {
		opts = append(opts, guard.WithDenyCache(guard.DenyCache{MaxKeys: c.DenyCacheKeys}))
	}
	if obs != nil {
		opts = append(opts, guard.WithObserver(obs))
	}
	g, err := guard.New(rs, opts...)
	if err != nil {
		_ = rs.Close()
		_ = client.Close()
		return nil, fmt.Errorf("guard: %w", err)
	}
	ls, err := lease.New(g, lease.WithLogger(log))
	if err != nil {
		_ = g.Close()
		_ = rs.Close()
		_ = client.Close()
		return nil, fmt.Errorf("lease: %w", err)
	}
	return &storeSet{
		store: ls,
		name:  fmt.Sprintf("redis (%s) at %s", t.Kind, c.Redis),
		ping:  func(ctx context.Context) error { return pingRedis(ctx, client) },
		guard: g,
		redis: client,
		// The lease layer first: it gives its blocks' unused units back.
		close: func() { _ = ls.Close(); _ = g.Close(); _ = rs.Close(); _ = client.Close() },
	}, nil
}

// pingRedis checks that Redis answers: every master of a Cluster, the
// current master of a Sentinel deployment, the one node otherwise.
func pingRedis(ctx context.Context, client redis.UniversalClient) error {
	if cc, ok := client.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			return n.Ping(ctx).Err()
		})
	}
	return client.Ping(ctx).Err()
}

// watch follows whether the store answers: it pings the backend every
// interval (1 s) and reports each change to set (true: reachable). The
// memory store is reported reachable once.
func (s *storeSet) watch(ctx context.Context, interval time.Duration, log *slog.Logger, set func(bool)) {
	if s.ping == nil {
		set(true)
		return
	}
	last, first := false, true
	check := func() {
		pctx, cancel := context.WithTimeout(ctx, interval)
		err := s.ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		ok := err == nil
		if ok != last || first {
			if ok {
				log.Info("store reachable", "store", s.name)
			} else {
				log.Warn("store unreachable", "store", s.name, "error", err)
			}
			set(ok)
			last, first = ok, false
		}
	}
	check()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			check()
		}
	}
}
