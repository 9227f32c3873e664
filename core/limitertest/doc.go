// Package limitertest is the conformance suite of core.Store: any store that
// passes Run makes the same decisions as the reference step functions of
// package algo, for every algorithm, under concurrency, with the same errors
// for bad input. The memory store and the Redis store both run it.
package limitertest
