package bench_test

import (
	"testing"

	"github.com/sluicehq/sluice/bench/membench"
)

// BenchmarkHotKeySerial: one key, b.N decisions in one goroutine.
func BenchmarkHotKeySerial(b *testing.B) { membench.RunAll(b, membench.HotKeySerial) }

// BenchmarkKeys100kParallel: 100k pre-warmed keys walked by GOMAXPROCS
// goroutines, each from its own random offset.
func BenchmarkKeys100kParallel(b *testing.B) { membench.RunAll(b, membench.Keys100kParallel) }

// BenchmarkHeapPerKey: live heap per key after inserting 1M distinct keys;
// run it with -benchtime=1x.
func BenchmarkHeapPerKey(b *testing.B) { membench.RunAll(b, membench.HeapPerKey) }
