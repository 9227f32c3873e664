package core

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/keyfunc"
)

// Tiering resolves the tier of a caller (free, premium, enterprise, ...)
// for the policies that have Tiers.
type Tiering struct {
	// Key identifies the caller whose tier is looked up (an API key, a user).
	Key keyfunc.Func
	// Resolve returns the caller's tier; "" or a tier a policy does not list
	// means that policy's default Limit. An error, or a panic, means the
	// default limits for this request, and is not cached. id may alias the
	// request's memory (under Fiber it does): Resolve must copy it
	// (strings.Clone) to keep it after it returns. Resolve is called
	// concurrently, on a cache miss, in the requesting goroutine.
	Resolve func(ctx context.Context, id string) (string, error)
	// TTL is how long a resolved tier is cached in memory (default 1 minute).
	TTL time.Duration
	// MaxEntries bounds the cache (default 100 000).
	MaxEntries int
}

type tierEntry struct {
	tier    string
	expires time.Time
}

// tierCache caches Resolve's answers. A caller with no identity, or whose
// lookup fails (or panics, as Key may too), gets the default limits (and the
// failure is not cached), so an outage of the tier source never blocks
// requests. The cache keeps copies of the identities it is given.
type tierCache struct {
	t  Tiering
	mu sync.Mutex
	m  map[string]tierEntry
}

// resolve calls Resolve, turning a panic into an error (the default
// limits apply).
func (c *tierCache) resolve(ctx context.Context, id string) (tier string, err error) {
	defer func() {
		if v := recover(); v != nil {
			tier, err = "", fmt.Errorf("sluice: Tiering.Resolve panicked: %v", v)
		}
	}()
	return c.t.Resolve(ctx, id)
}

func newTierCache(t *Tiering) *tierCache {
	c := &tierCache{t: *t, m: map[string]tierEntry{}}
	if c.t.TTL <= 0 {
		c.t.TTL = time.Minute
	}
	if c.t.MaxEntries <= 0 {
		c.t.MaxEntries = 100_000
	}
	return c
}

func (c *tierCache) tier(ctx context.Context, r keyfunc.Request) string {
	id, err := callKey(c.t.Key, r)
	if err != nil || id == "" {
		return ""
	}
	now := time.Now()
	c.mu.Lock()
	e, ok := c.m[id]
	c.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.tier
	}
	tier, err := c.resolve(ctx, id)
	if err != nil {
		return ""
	}
	// id may alias the request's buffers (under Fiber it does), which the
	// next request overwrites: the cache keeps a copy.
	id = strings.Clone(id)
	c.mu.Lock()
	if len(c.m) >= c.t.MaxEntries { // drop about an eighth, expired first
		n := 0
		for k, v := range c.m {
			if now.After(v.expires) || n < c.t.MaxEntries/8 {
				delete(c.m, k)
				n++
			}
		}
	}
	c.m[id] = tierEntry{tier: tier, expires: now.Add(c.t.TTL)}
	c.mu.Unlock()
	return tier
}
