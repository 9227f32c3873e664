//go:build race

package redisstore_test

// raceBuild: under the race detector sync.Pool drops items at random (the
// store's pooled calls among them), so allocation counts vary from run to
// run: the allocation tests allow for the calls made anew.
const raceBuild = true
