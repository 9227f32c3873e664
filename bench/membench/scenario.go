package membench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// ParallelKeys is the size of the key set of the parallel scenario.
const ParallelKeys = 100_000

// HeapKeys is the number of distinct keys the heap scenario inserts. The
// report program lowers it for quick runs.
var HeapKeys = 1_000_000

// Scenario is one benchmark, run once per implementation.
type Scenario struct {
	// Name is the benchmark name without its "Benchmark" prefix.
	Name string
	// Title describes the scenario in the report.
	Title string
	// Heap is true for the scenario that reports bytes/key rather than a
	// per-decision cost.
	Heap bool
	// Run measures impl; it is a testing benchmark function.
	Run func(b *testing.B, impl Impl)
}

// Scenarios returns the three scenarios in report order.
func Scenarios() []Scenario {
	return []Scenario{
		{Name: "HotKeySerial", Title: "hot key, serial", Run: HotKeySerial},
		{Name: "Keys100kParallel", Title: "100k keys, parallel", Run: Keys100kParallel},
		{Name: "HeapPerKey", Title: "heap per key", Heap: true, Run: HeapPerKey},
	}
}

// RunAll runs scenario as one sub-benchmark per implementation, named after
// the implementation (BenchmarkHotKeySerial/sluice, ...).
func RunAll(b *testing.B, scenario func(*testing.B, Impl)) {
	for _, impl := range Impls() {
		b.Run(impl.Name, func(b *testing.B) { scenario(b, impl) })
	}
}

// HotKeySerial makes b.N decisions for one key from one goroutine. After the
// first Rate decisions almost all are denials, so it mostly measures the
// deny path of a hot, existing key.
func HotKeySerial(b *testing.B, impl Impl) {
	l := newLimiter(b, impl, Config{})
	defer l.Close()
	const key = "user:hot"
	allowed := 0
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if l.Allow(key) {
			allowed++
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	// Every implementation must admit the first burst and, even as a fixed
	// window straddling a boundary, no more than two windows' worth plus
	// the refill: this catches a limiter configured to a different limit.
	lo := min(b.N, Rate)
	hi := 2*Rate + int(Rate*elapsed.Seconds()) + 1
	if allowed < lo || allowed > hi {
		fatalf(b, "%s: %d of %d decisions allowed in %s, want between %d and %d", impl.Name, allowed, b.N, elapsed, lo, hi)
	}
}

// Keys100kParallel makes decisions from GOMAXPROCS goroutines over
// ParallelKeys existing keys: each goroutine walks the pre-built, pre-warmed
// key set from its own random offset.
func Keys100kParallel(b *testing.B, impl Impl) {
	keys := Keys(ParallelKeys)
	l := newLimiter(b, impl, Config{})
	defer l.Close()
	for _, k := range keys {
		if !l.Allow(k) {
			fatalf(b, "%s: first decision for %q denied", impl.Name, k)
		}
	}
	runtime.GC() // do not charge the warm-up's garbage to the measurement
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		n := len(keys)
		i := rand.IntN(n)
		for pb.Next() {
			l.Allow(keys[i])
			if i++; i == n {
				i = 0
			}
		}
	})
	b.StopTimer()
}

// HeapPerKey inserts HeapKeys distinct keys once each into a fresh limiter
// (background cleanup disabled so that all stay resident) and reports the
// growth of the live heap, measured after garbage collection, per key as
// bytes/key. The keys are built before the first measurement and kept alive
// until after the second, so their own memory is not counted. It also
// reports ns/key (the insertions, timed) and allocs/key; B/op and allocs/op
// are per b.N iteration, that is per HeapKeys insertions.
func HeapPerKey(b *testing.B, impl Impl) {
	n := HeapKeys
	keys := Keys(n)
	var retained, mallocs float64
	var insert time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		l := newLimiter(b, impl, Config{NoCleanup: true})
		before := settledHeap()
		b.StartTimer()
		start := time.Now()
		for _, k := range keys {
			l.Allow(k)
		}
		insert += time.Since(start)
		b.StopTimer()
		after := settledHeap()
		if c, ok := l.(Lener); ok {
			if got := c.Len(); got != n {
				fatalf(b, "%s: %d live keys after inserting %d", impl.Name, got, n)
			}
		}
		retained += float64(int64(after.HeapAlloc) - int64(before.HeapAlloc))
		mallocs += float64(after.Mallocs - before.Mallocs)
		if err := l.Close(); err != nil {
			fatalf(b, "%s: Close: %v", impl.Name, err)
		}
	}
	runtime.KeepAlive(keys)
	per := float64(b.N) * float64(n)
	b.ReportMetric(retained/per, "bytes/key")
	b.ReportMetric(float64(insert.Nanoseconds())/per, "ns/key")
	b.ReportMetric(mallocs/per, "allocs/key")
}

// settledHeap collects garbage until the live heap stops shrinking (a
// finalizer may release more, such as a forgotten ulule cache) and returns
// the memory statistics.
func settledHeap() runtime.MemStats {
	var ms runtime.MemStats
	prev := uint64(math.MaxUint64)
	for range 10 {
		runtime.GC()
		runtime.ReadMemStats(&ms)
		if ms.HeapAlloc+64<<10 >= prev {
			break
		}
		prev = ms.HeapAlloc
		time.Sleep(time.Millisecond) // let finalizers run
	}
	return ms
}

var (
	keysMu    sync.Mutex
	keysCache = map[int][]string{}
)

// Keys returns n distinct keys "user:0" ... "user:<n-1>", each its own
// allocation as if read from a request. The slice is built once per n and
// shared: do not modify it.
func Keys(n int) []string {
	keysMu.Lock()
	defer keysMu.Unlock()
	if k, ok := keysCache[n]; ok {
		return k
	}
	k := make([]string, n)
	for i := range k {
		k[i] = "user:" + strconv.Itoa(i)
	}
	keysCache[n] = k
	return k
}

func newLimiter(b *testing.B, impl Impl, c Config) Limiter {
	b.Helper()
	l, err := impl.New(c)
	if err != nil {
		fatalf(b, "%s: new limiter: %v", impl.Name, err)
	}
	return l
}

var (
	failMu  sync.Mutex
	failMsg string
)

// fatalf fails b, remembering the message for LastFailure: testing.Benchmark
// discards a failed benchmark's log.
func fatalf(b *testing.B, format string, args ...any) {
	b.Helper()
	msg := fmt.Sprintf(format, args...)
	failMu.Lock()
	failMsg = msg
	failMu.Unlock()
	b.Fatal(msg)
}

// LastFailure returns, and forgets, the message of the last benchmark that
// failed in this package, or "".
func LastFailure() string {
	failMu.Lock()
	defer failMu.Unlock()
	msg := failMsg
	failMsg = ""
	return msg
}
