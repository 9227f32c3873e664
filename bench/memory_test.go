package bench_test

import (
	"testing"

	"github.com/sluicehq/sluice/bench/membench"
)

// BenchmarkHotKeySerial: one key, b.N decisions in one goroutine.
func BenchmarkHotKeySerial(b *testing.B) { membench.RunAll(b, membench.HotKeySerial) }

// BenchmarkHotKeyParallel: one key, b.N decisions from GOMAXPROCS goroutines.
func BenchmarkHotKeyParallel(b *testing.B) { membench.RunAll(b, membench.HotKeyParallel) }

// BenchmarkKeys100kSerial: 100k pre-warmed keys walked by one goroutine.
func BenchmarkKeys100kSerial(b *testing.B) { membench.RunAll(b, membench.Keys100kSerial) }

// BenchmarkKeys100kParallel: 100k pre-warmed keys walked by GOMAXPROCS
// goroutines, each from its own random offset.
func BenchmarkKeys100kParallel(b *testing.B) { membench.RunAll(b, membench.Keys100kParallel) }

// BenchmarkHeapPerKey: live heap per key after inserting 1M distinct keys;
// run it with -benchtime=1x.
func BenchmarkHeapPerKey(b *testing.B) { membench.RunAll(b, membench.HeapPerKey) }
