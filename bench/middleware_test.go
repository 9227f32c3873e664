package bench_test

import (
	"testing"

	"github.com/sluicehq/sluice/bench/mwbench"
)

// BenchmarkMiddlewareOverhead: handler.ServeHTTP of each middleware around a
// bare handler (and the bare handler itself), one client IP, one reused
// ResponseWriter, never denied. Subtract .../bare for the overhead.
func BenchmarkMiddlewareOverhead(b *testing.B) { mwbench.RunAll(b, mwbench.Overhead) }
