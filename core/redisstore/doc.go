// Package redisstore is the core.Store for several instances sharing one
// limit: every decision is atomic Lua (package lua) run on Redis, on Redis
// server time, with exactly the semantics of the memory store.
//
// It takes any redis.UniversalClient: a single node (redis.Client), Sentinel
// (redis.NewFailoverClient) or Redis Cluster (redis.ClusterClient). A
// redis.Ring also works, but only as a cache-grade store: when its shards
// change, keys are remapped and their state is lost.
//
// The Redis key of a core.Key is "<prefix>:{<identity>}:<policy>:<algorithm>"
// ("<prefix>:{<identity>}:<algorithm>" without a policy): only the identity
// is in the hash tag, so every policy of one identity lives in one Cluster
// slot. Braces and percent signs in either part are percent-escaped so they
// cannot break the tag; a part longer than 200 bytes is replaced by its
// SHA-256 (22 base64url characters) rather than stored raw. (These are the
// keys of earlier versions, which took "identity\x00policy" joined, so a
// rolling upgrade shares state; see Store.Key.)
//
// On Redis 7 and later the code runs as Redis Functions (one library, loaded
// on first use and again after FUNCTION FLUSH, a restart or a failover);
// elsewhere, or WithFunctions(false), as scripts with EVALSHA that fall back
// to EVAL on NOSCRIPT. Concurrent decisions are pipelined automatically: a
// call on an idle store is sent at once; calls that arrive while the
// pipeline of their server is in flight queue and leave together, in one
// write, when it returns, and on a standalone server the one-op decisions
// among them go as one call. Each decision stays atomic on its own, and
// returns by its deadline, queued or in flight.
//
// A Take of several ops of several identities is decided by one
// script on a standalone server or Sentinel, where every key lives on one
// server; on a Cluster, by one script per identity, all at one instant,
// and, when one denies, a second round trip that puts the others' keys back
// exactly as they were (see docs/redis.md).
// On a Cluster each master's calls are pipelined apart, errors name their
// master (NodeError), Node tells core/guard which master serves a key, and
// faults make the client reload its slot map, so a failover is followed
// within about 100 ms of the cluster agreeing on it.
//
// The state of a key is its Redis expiry and one integer (see lua/common.lua),
// about 110-120 bytes of Redis memory per identity for the O(1) algorithms on
// Redis 7.0 — as long as Redis shares small integers, which it does unless
// maxmemory is set with an LRU or LFU policy. Use a dedicated instance or
// the noeviction policy: an evicted key is a client's quota given back.
package redisstore
