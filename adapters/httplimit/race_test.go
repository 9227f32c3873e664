//go:build race

package httplimit_test

// raceAllocs is the slack the allocation tests give the race detector,
// under which sync.Pool drops items at random (the framework's pools, the
// Limiter's) and allocations vary from run to run.
const raceAllocs = 2
