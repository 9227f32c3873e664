//go:build !race

package engine_test

// raceBuild: the race detector is on (see race_test.go).
const raceBuild = false
