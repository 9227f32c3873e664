package adaptertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
)

// Allocations is implemented by an HTTP harness that bounds the
// allocations its middleware adds to an allowed request.
type Allocations interface {
	// Serve returns a function that serves one GET "/" from 203.0.113.7
	// through the framework to a handler that answers 204, into a writer
	// that keeps nothing, behind the middleware of l (nil: none, the bare
	// framework).
	Serve(t *testing.T, l *core.Limiter) func()
	// MaxAllocs is the most allocations the middleware adds to an allowed
	// request keyed by IP (with what the race detector adds).
	MaxAllocs() float64
}

// allocations: an allowed request costs the middleware no more than
// MaxAllocs allocations over the bare framework.
func allocations(t *testing.T, a Allocations) {
	l := IPLimiter(t, core.Per(1_000_000_000, time.Second))
	bare, limited := LeastAllocs(a.Serve(t, nil)), LeastAllocs(a.Serve(t, l))
	require.LessOrEqual(t, limited-bare, a.MaxAllocs(), "bare %v, limited %v", bare, limited)
}

// LeastAllocs is the fewest allocations f makes in a run, over five
// measurements: testing.AllocsPerRun counts every goroutine's allocations,
// and one that another test left running (a breaker probing a stopped
// Redis, say) only ever adds to them.
func LeastAllocs(f func()) float64 {
	least := testing.AllocsPerRun(100, f)
	for range 4 {
		time.Sleep(time.Millisecond)
		least = min(least, testing.AllocsPerRun(100, f))
	}
	return least
}
