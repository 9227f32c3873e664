//go:build race

package ginlimit_test

// raceAllocs is the allocation the race detector adds to a request through
// the middleware.
const raceAllocs = 1
