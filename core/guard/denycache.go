package guard

import (
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core"
)

const denyShards = 16

// denyCache holds the backend's recent denials: key -> until when a request
// of at least the denied cost stays denied. It is bounded by MaxKeys.
type denyCache struct {
	seed     maphash.Seed
	maxTTL   int64
	perShard int
	shards   [denyShards]denyShard
}

type denyShard struct {
	mu sync.Mutex
	m  map[core.Key]*denyEntry
	_  [40]byte // keep shards on separate cache lines
}

// denyEntry is one denial. A denial of a Take of one op has no group; a
// denial inside a group remembers the whole group (its keys, limits and
// results), since the group's answer is what must be repeated.
type denyEntry struct {
	until, at int64 // monotonic ns: end of the denial, time stored
	cost      int64 // the denied cost: only requests of this cost are answered
	limit     core.Limit
	res       core.Result // single
	idx       int         // group: the denying op
	keys      []core.Key
	limits    []core.Limit
	results   []core.Result
}

func newDenyCache(d DenyCache) *denyCache {
	c := &denyCache{seed: maphash.MakeSeed(), maxTTL: int64(d.MaxTTL)}
	c.perShard = max(1, (d.MaxKeys+denyShards-1)/denyShards)
	for i := range c.shards {
		c.shards[i].m = make(map[core.Key]*denyEntry)
	}
	return c
}

func (c *denyCache) shard(k core.Key) *denyShard {
	return &c.shards[maphash.Comparable(c.seed, k)%denyShards]
}

// aged returns r as it stands now: the wait and the reset shortened by the
// time elapsed, marked as coming from the cache.
func aged(r core.Result, e *denyEntry, now int64) core.Result {
	elapsed := now - e.at
	if !r.Allowed {
		r.RetryAfter = max(r.RetryAfter-time.Duration(elapsed), 1)
	}
	r.ResetAfter = max(r.ResetAfter-time.Duration(elapsed), r.RetryAfter)
	r.Previous = r.State
	r.Source = core.FromDenyCache
	return r
}

// lookupOne answers a Take of one op if key is known to be denied for cost.
// An entry it cannot use is dropped: the request goes to the backend,
// which may admit it and so make the entry stale.
func (c *denyCache) lookupOne(key core.Key, l core.Limit, cost, now int64) (core.Result, bool) {
	sh := c.shard(key)
	sh.mu.Lock()
	e := sh.m[key]
	if e == nil {
		sh.mu.Unlock()
		return core.Result{}, false
	}
	if now >= e.until || e.keys != nil || e.limit != l || cost != e.cost {
		delete(sh.m, key)
		sh.mu.Unlock()
		return core.Result{}, false
	}
	res := aged(e.res, e, now)
	sh.mu.Unlock()
	return res, true
}

// lookupGroup answers a Take of a group if one of its binding ops is known to deny
// this very group. On a miss, the entries of the group's keys are dropped,
// as in lookupOne.
func (c *denyCache) lookupGroup(ops []core.Op, out []core.Result, now int64) bool {
	for i := range ops {
		op := &ops[i]
		if op.Cost <= 0 {
			continue
		}
		sh := c.shard(op.Key)
		sh.mu.Lock()
		e := sh.m[op.Key]
		if e == nil {
			sh.mu.Unlock()
			continue
		}
		if !op.Shadow && now < e.until && e.idx == i && op.Cost == e.cost && e.sameGroup(ops) {
			for j := range out {
				out[j] = aged(e.results[j], e, now)
			}
			sh.mu.Unlock()
			return true
		}
		delete(sh.m, op.Key)
		sh.mu.Unlock()
	}
	return false
}

func (e *denyEntry) sameGroup(ops []core.Op) bool {
	if len(e.keys) != len(ops) {
		return false
	}
	for j := range ops {
		if e.keys[j] != ops[j].Key || e.limits[j] != ops[j].Limit {
			return false
		}
	}
	return true
}

// storeOne remembers the denial of a Take of one op, under a copy of key
// (whose strings may alias a request's buffers).
func (c *denyCache) storeOne(key core.Key, l core.Limit, cost int64, res core.Result, now int64) {
	c.put(clone(key), &denyEntry{until: c.until(res, now), at: now, cost: cost, limit: l, res: res})
}

// storeGroup remembers a denied group under each op that denied it.
func (c *denyCache) storeGroup(ops []core.Op, out []core.Result, now int64) {
	var keys []core.Key
	var limits []core.Limit
	var results []core.Result
	for i := range ops {
		if ops[i].Shadow || ops[i].Cost <= 0 || !deniedFor(out[i]) {
			continue
		}
		if keys == nil {
			keys = make([]core.Key, len(ops))
			limits = make([]core.Limit, len(ops))
			for j := range ops {
				// Keys outlive the call: copy them, since a caller's may
				// alias request buffers (Fiber's do).
				keys[j], limits[j] = clone(ops[j].Key), ops[j].Limit
			}
			results = slices.Clone(out)
		}
		c.put(keys[i], &denyEntry{until: c.until(out[i], now), at: now, cost: ops[i].Cost,
			idx: i, keys: keys, limits: limits, results: results})
	}
}

func (c *denyCache) until(res core.Result, now int64) int64 {
	return now + min(int64(res.RetryAfter), c.maxTTL)
}

// put stores e under key, making room first if the shard is full: expired
// entries go first, then an arbitrary one.
func (c *denyCache) put(key core.Key, e *denyEntry) {
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.m[key]; !ok && len(sh.m) >= c.perShard {
		evicted, seen := false, 0
		var victim core.Key
		for k, old := range sh.m {
			if old.until <= e.at {
				delete(sh.m, k)
				evicted = true
			}
			if seen == 0 {
				victim = k
			}
			if seen++; seen >= 8 {
				break
			}
		}
		if !evicted {
			delete(sh.m, victim)
		}
	}
	sh.m[key] = e
}

// forget drops key (a refund, reset or override through the Store).
func (c *denyCache) forget(key core.Key) {
	sh := c.shard(key)
	sh.mu.Lock()
	delete(sh.m, key)
	sh.mu.Unlock()
}

// len returns the number of entries held.
func (c *denyCache) len() int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// clone copies k's strings, which may alias a request's buffers.
func clone(k core.Key) core.Key {
	return core.Key{Identity: strings.Clone(k.Identity), Policy: strings.Clone(k.Policy)}
}
