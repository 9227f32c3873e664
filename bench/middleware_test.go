package bench_test

import (
	"testing"

	"github.com/sluicehq/sluice/bench/mwbench"
)

// BenchmarkMiddlewareOverhead: handler.ServeHTTP of each middleware around a
// bare handler (and the bare handler itself), one client IP, one reused
// ResponseWriter, never denied. Subtract .../bare for the overhead.
func BenchmarkMiddlewareOverhead(b *testing.B) { mwbench.RunAll(b, mwbench.Overhead) }

// BenchmarkFiberMiddlewareOverhead: the same for Fiber, through the app's
// fasthttp handler with one reused RequestCtx. Subtract .../bare.
func BenchmarkFiberMiddlewareOverhead(b *testing.B) { mwbench.RunAllFiber(b, mwbench.FiberOverhead) }
