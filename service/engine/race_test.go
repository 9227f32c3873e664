//go:build race

package engine_test

// raceBuild: the race detector is on. sync.Pool then drops items at
// random, so the allocation tests, which count on pooled memory, skip.
const raceBuild = true
