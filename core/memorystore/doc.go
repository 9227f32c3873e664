// Package memorystore is the embedded default core.Store: every decision is
// made in process, under the lock of one of many shards, with no I/O.
//
// A core.Key is kept as a seeded 64-bit hash of its identity and policy,
// hashed as they are, never joined (with the algorithm mixed in), in
// open-addressing tables of 24-byte slots, the low byte of the hash
// replaced by an id of the key's limit, so a live key of an O(1) algorithm
// costs about 30-45 bytes of heap and a decision on an existing key
// allocates nothing. No key string is retained, except a copy of the key of
// each override.
//
// # Eviction
//
// The store is bounded (WithMaxKeys, divided evenly among the shards). When
// a full shard must insert a key, it evicts the key of a random sample (16
// keys) that is closest to fresh, which forgets the least:
//
//   - an expired key first;
//   - a key that is not throttled (a request of cost 1 would pass now) before
//     one that is: a throttled key is evicted only when every key of the
//     sample (extended to up to 64 random slots) is throttled;
//   - among those, the one using the smallest share of its own capacity now
//     (whatever its algorithm and limit: keys of every policy share the
//     store), then the one fresh soonest.
//
// Usage is computed by a peek through the key's own algorithm, so a
// throttled fixed-window, sliding-window or sliding-log key is as safe as a
// throttled bucket. The first 255 distinct limits are tracked this way; keys
// of further limits, and sliding logs of more than 64 entries, are judged by
// their warning state (Throttled as fully used, Warning as 85%, Normal as
// 50%). A flood of new keys therefore evicts other light keys, and a
// throttled key stays throttled until its wait is over.
//
// # Sweeping and resizing
//
// Expired keys are deleted when touched and by a sweeper that, once per
// interval, walks every shard in chunks of 256 slots, releasing the shard's
// lock and yielding between chunks; a table that stays sparse shrinks. A
// table that grows or shrinks is not rehashed at once: its keys move to the
// new table a few at a time, with each insert and each sweeper chunk. No
// decision waits for more than one such chunk (a few µs). Close stops the
// sweeper.
//
// Two different keys share state only if they fall in the same shard and
// their seeded hashes, less the low byte, collide: with a million live keys
// the chance of any collision is about 1.2×10⁻⁷ with 64 shards (the default
// on up to four CPUs), 3×10⁻⁸ with 256 or more.
package memorystore
