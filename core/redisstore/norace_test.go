//go:build !race

package redisstore_test

// raceBuild: see race_test.go.
const raceBuild = false
