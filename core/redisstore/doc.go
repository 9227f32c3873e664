// Package redisstore is the core.Store for several instances sharing one
// limit: every decision is one atomic Lua script (package lua) run on Redis,
// on Redis server time, with exactly the semantics of the memory store.
//
// It takes any redis.UniversalClient: a single node (redis.Client), Sentinel
// (redis.NewFailoverClient) or Redis Cluster (redis.ClusterClient). A
// redis.Ring also works, but only as a cache-grade store: when its shards
// change, keys are remapped and their state is lost.
//
// Keys are "<prefix>:{<identity>}:<policy>:<algorithm>": the Limiter passes
// keys of the form identity + "\x00" + policy, and only the identity is in
// the hash tag, so every policy of one identity lives in one Cluster slot. A
// key without "\x00" is all identity. Braces and percent signs in the key are
// percent-escaped so they cannot break the tag; a key longer than 200 bytes is
// replaced by its SHA-256 (22 base64url characters) rather than stored raw.
//
// Scripts run with EVALSHA and fall back to EVAL on NOSCRIPT, so a SCRIPT
// FLUSH, a restart or a failover costs one extra round trip. Concurrent
// decisions are pipelined automatically: a call on an idle store is sent at
// once; calls that arrive while pipelines are in flight queue and leave
// together in the next one. Each decision stays its own atomic script.
//
// The state of a key is its Redis expiry and one integer (see lua/common.lua),
// about 110-120 bytes of Redis memory per identity for the O(1) algorithms on
// Redis 7.0 — as long as Redis shares small integers, which it does unless
// maxmemory is set with an LRU or LFU policy. Use a dedicated instance or
// the noeviction policy: an evicted key is a client's quota given back.
package redisstore
