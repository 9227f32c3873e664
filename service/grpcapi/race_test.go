//go:build race

package grpcapi_test

// raceBuild: the race detector is on. sync.Pool then drops items at
// random, so the allocation tests, which count on pooled memory, skip;
// make test runs them once more without the detector (ALLOC_PINS).
const raceBuild = true
