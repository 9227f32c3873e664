package membench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// ParallelKeys is the size of the key set of the Keys100k scenarios.
const ParallelKeys = 100_000

// ManyKeys is the key count the Keys100k scenarios use: ParallelKeys, lowered
// by the package's tests to keep them short.
var ManyKeys = ParallelKeys

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

// Scenarios returns the scenarios in report order.
func Scenarios() []Scenario {
	return []Scenario{
		{Name: "HotKeySerial", Title: "hot key, serial", Run: HotKeySerial},
		{Name: "HotKeyParallel", Title: "hot key, parallel", Run: HotKeyParallel},
		{Name: "Keys100kSerial", Title: "100k keys, serial", Run: Keys100kSerial},
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

// HotKey is the key of the hot-key scenarios.
const HotKey = "user:hot"

// HotKeySerial makes b.N decisions for one key from one goroutine. After the
// first Rate decisions almost all are denials, so it mostly measures the
// deny path of a hot, existing key.
func HotKeySerial(b *testing.B, impl Impl) {
	l := newLimiter(b, impl, Config{})
	defer l.Close()
	allowed := 0
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu := time.Now(), processCPU()
	for i := 0; i < b.N; i++ {
		if l.Allow(HotKey) {
			allowed++
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	reportCPU(b, cpu)
	checkHot(b, impl, hotCount{allowed: int64(allowed), failed: failures(l), n: int64(b.N)}, elapsed)
}

// HotKeyParallel makes b.N decisions for one key from GOMAXPROCS goroutines
// (b.RunParallel): the contention of one hot key, again mostly denials.
func HotKeyParallel(b *testing.B, impl Impl) {
	l := newLimiter(b, impl, Config{})
	defer l.Close()
	var allowed atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu := time.Now(), processCPU()
	b.RunParallel(func(pb *testing.PB) {
		n := int64(0)
		for pb.Next() {
			if l.Allow(HotKey) {
				n++
			}
		}
		allowed.Add(n)
	})
	elapsed := time.Since(start)
	b.StopTimer()
	reportCPU(b, cpu)
	checkHot(b, impl, hotCount{allowed: allowed.Load(), failed: failures(l), n: int64(b.N)}, elapsed)
}

// reportCPU reports, as cpu-ns/op, the CPU time the process used since it
// read cpu (processCPU) per decision: every goroutine's, the library's own
// background work included. On a machine shared with other jobs it is
// steadier than ns/op, which also counts the time spent waiting for a CPU;
// with several goroutines it is the cost of a decision, not its rate.
func reportCPU(b *testing.B, cpu time.Duration) {
	if cpu > 0 && b.N > 0 {
		b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
	}
}

// hotCount is what a hot-key run decided: n decisions, of which allowed were
// admitted and failed made no decision at all (see Failer).
type hotCount struct {
	allowed, failed, n int64
}

// failures returns how many decisions l has failed so far (see Failer), 0
// for a limiter that cannot fail one.
func failures(l Limiter) int64 {
	if f, ok := l.(Failer); ok {
		return f.Failures()
	}
	return 0
}

// checkHot fails b unless what a run of decisions on one key in elapsed
// decided is plausible for the shared limit: every implementation must admit
// the first burst and, even as a fixed window straddling a boundary, no more
// than two windows' worth plus the refill. This catches a limiter configured
// to a different limit.
//
// A failed decision (throttled's GCRA under contention: see Failer) took
// nothing from the key, so the burst the others must reach is that of the
// decisions made, n - failed; a run where most decisions failed is a broken
// harness, not a contended peer.
func checkHot(b *testing.B, impl Impl, c hotCount, elapsed time.Duration) {
	b.Helper()
	if msg := hotProblem(c, elapsed); msg != "" {
		fatalf(b, "%s: %s", impl.Name, msg)
	}
}

// hotProblem is checkHot's verdict: "" when c is plausible.
func hotProblem(c hotCount, elapsed time.Duration) string {
	if 2*c.failed > c.n {
		return fmt.Sprintf("%d of %d decisions on one key failed", c.failed, c.n)
	}
	lo := min(c.n-c.failed, Rate)
	hi := 2*Rate + int64(Rate*elapsed.Seconds()/Period.Seconds()) + 1
	if c.allowed < lo || c.allowed > hi {
		return fmt.Sprintf("%d of %d decisions on one key allowed (%d failed) in %s, want between %d and %d", c.allowed, c.n, c.failed, elapsed, lo, hi)
	}
	return ""
}

// Keys100kSerial makes b.N decisions from one goroutine over ParallelKeys
// existing keys, walked in order from a random offset.
func Keys100kSerial(b *testing.B, impl Impl) {
	keys, l := warmKeys(b, impl)
	defer l.Close()
	n := len(keys)
	i := rand.IntN(n)
	allowed := int64(0)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	for range b.N {
		if l.Allow(keys[i]) {
			allowed++
		}
		if i++; i == n {
			i = 0
		}
	}
	b.StopTimer()
	reportCPU(b, cpu)
	checkKeys(b, impl, allowed, int64(b.N), n, 1)
}

// Keys100kParallel makes decisions from GOMAXPROCS goroutines over
// ParallelKeys existing keys: each goroutine walks the pre-built, pre-warmed
// key set from its own random offset.
func Keys100kParallel(b *testing.B, impl Impl) {
	keys, l := warmKeys(b, impl)
	defer l.Close()
	var allowed atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	b.RunParallel(func(pb *testing.PB) {
		n := len(keys)
		i := rand.IntN(n)
		a := int64(0)
		for pb.Next() {
			if l.Allow(keys[i]) {
				a++
			}
			if i++; i == n {
				i = 0
			}
		}
		allowed.Add(a)
	})
	b.StopTimer()
	reportCPU(b, cpu)
	checkKeys(b, impl, allowed.Load(), int64(b.N), len(keys), runtime.GOMAXPROCS(0))
}

// warmKeys returns the ManyKeys keys and a fresh limiter in which each
// has been used once (and admitted).
func warmKeys(b *testing.B, impl Impl) ([]string, Limiter) {
	keys := Keys(ManyKeys)
	l := newLimiter(b, impl, Config{})
	for _, k := range keys {
		if !l.Allow(k) {
			l.Close()
			fatalf(b, "%s: first decision for %q denied", impl.Name, k)
		}
	}
	runtime.GC() // do not charge the warm-up's garbage to the measurement
	return keys, l
}

// checkKeys fails b if a decision over many keys was denied while no key
// can have reached the limit: n decisions by walkers goroutines over nkeys
// keys use a key at most n/nkeys+walkers+1 times, besides its warm-up.
func checkKeys(b *testing.B, impl Impl, allowed, n int64, nkeys, walkers int) {
	b.Helper()
	if n/int64(nkeys)+int64(walkers)+2 <= Rate && allowed != n {
		fatalf(b, "%s: %d of %d decisions over %d keys denied, none may be", impl.Name, n-allowed, n, nkeys)
	}
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
