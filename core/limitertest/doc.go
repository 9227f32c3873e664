// Package limitertest is the conformance suite of core.Store: any store that
// passes Run implements the whole contract. It makes the same decisions as
// the reference step functions of package algo, for every algorithm, under
// concurrency, with the same errors for bad input; decides groups all or
// nothing (shadow ops included); refunds exactly or not at all, through
// clock steps; keeps overrides and blocks per key, and tells exact waits
// under them (the key's own state deciding from their end); and keeps every key
// (identity and policy) apart. The memory store, the Redis store
// (standalone, Cluster and Sentinel) and the guard all run it.
package limitertest
