// Package memorystore is the embedded default core.Store: every decision is
// made in process, under the lock of one of many shards, with no I/O.
//
// Keys are kept as seeded 64-bit hashes (with the algorithm mixed in) in
// open-addressing tables of 24-byte slots, so a live key of an O(1) algorithm
// costs about 30-45 bytes of heap and a decision on an existing key allocates
// nothing. The store is bounded (WithMaxKeys): when a shard is full, the key
// closest to its fresh state is evicted, which forgets the least. Expired keys
// are deleted when touched and by an incremental sweeper that holds one shard
// lock for a bounded number of slots at a time; Close stops it.
//
// Two different keys share state only if their 64-bit seeded hashes collide:
// with a million live keys the chance of any collision is about 3×10⁻⁸.
package memorystore
