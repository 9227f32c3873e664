// Package cacheslot spreads limits over the small lock-free caches of
// compiled limits that the memory and Redis stores keep.
package cacheslot

import "github.com/sluicehq/sluice/core"

// Of returns the slot of l in a cache of n compiled Specs, mixing every
// field (periods are often multiples of large powers of two in ns). Both
// stores use it to find a limit's compiled form without a lock.
func Of(l core.Limit, n int) int {
	h := uint64(l.Rate)*0x9e3779b97f4a7c15 ^ uint64(l.Period)*0xc2b2ae3d27d4eb4f ^ uint64(l.Burst)*0x165667b19e3779f9 ^ uint64(l.Algorithm)
	h ^= h >> 29
	h *= 0xbf58476d1ce4e5b9
	return int((h >> 32) % uint64(n))
}
