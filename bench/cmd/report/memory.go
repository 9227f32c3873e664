package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench/membench"
)

// sample is one run's metrics.
type sample struct {
	ns, allocs, bytes float64 // per op; for the heap scenario per key
	cpu               float64 // the process's CPU ns per op (0: not measured)
}

// row is the median of the runs of one (scenario, implementation).
type row struct {
	sc     membench.Scenario
	impl   membench.Impl
	med    sample
	bestNs float64 // the fastest run's ns
	spread float64 // (max-min)/median of the primary metric
	runs   int
	failed string
}

func (r *row) ok() bool { return r.failed == "" && r.runs > 0 }

// primary is the metric the heap scenario compares (bytes/key); the others
// compare time.
func (r *row) primary() float64 {
	if r.sc.Heap {
		return r.med.bytes
	}
	return r.med.ns
}

// memSection is the in-memory area.
type memSection struct {
	timing
	scs  []membench.Scenario
	rows []row
}

// scenarioRows returns the rows of scenario name.
func (m *memSection) scenarioRows(name string) []row {
	var out []row
	for _, r := range m.rows {
		if r.sc.Name == name {
			out = append(out, r)
		}
	}
	return out
}

// compare returns sluice's row and the best peer's by the primary metric
// (nil if either is missing).
func compare(rows []row) (self, best *row) {
	for i := range rows {
		r := &rows[i]
		switch {
		case !r.ok():
		case !r.impl.Peer:
			self = r
		case best == nil || r.primary() < best.primary():
			best = r
		}
	}
	if self == nil || best == nil || best.primary() <= 0 {
		return nil, nil
	}
	return self, best
}

func runScenario(sc membench.Scenario, ims []membench.Impl, count int, benchtime time.Duration) []row {
	bt := benchtime.String()
	if sc.Heap {
		bt = "1x"
	}
	if err := flag.Set("test.benchtime", bt); err != nil {
		fatal(err)
	}
	samples := make([][]sample, len(ims))
	failed := make([]string, len(ims))
	for rep := range count {
		// Rotate the order so that no implementation always runs first,
		// right after a GC, or right after a given other one.
		for j := range ims {
			i := (j + rep) % len(ims)
			if failed[i] != "" {
				continue
			}
			impl := ims[i]
			runtime.GC()
			r := testing.Benchmark(func(b *testing.B) { sc.Run(b, impl) })
			if r.N == 0 {
				if failed[i] = membench.LastFailure(); failed[i] == "" {
					failed[i] = "benchmark failed"
				}
				fmt.Fprintf(os.Stderr, "%s/%s run %d/%d: FAILED: %s\n", sc.Name, impl.Name, rep+1, count, failed[i])
				continue
			}
			s := toSample(sc, r)
			samples[i] = append(samples[i], s)
			if sc.Heap {
				fmt.Fprintf(os.Stderr, "%s/%s run %d/%d: %.1f bytes/key, %.0f ns/key\n", sc.Name, impl.Name, rep+1, count, s.bytes, s.ns)
			} else {
				fmt.Fprintf(os.Stderr, "%s/%s run %d/%d: %.1f ns/op (N=%d)\n", sc.Name, impl.Name, rep+1, count, s.ns, r.N)
			}
		}
	}
	rows := make([]row, len(ims))
	for i, impl := range ims {
		rows[i] = row{sc: sc, impl: impl, runs: len(samples[i]), failed: failed[i]}
		if len(samples[i]) == 0 {
			continue
		}
		prim := func(s sample) float64 { return s.ns }
		if sc.Heap {
			prim = func(s sample) float64 { return s.bytes }
		}
		rows[i].med = medians(samples[i])
		rows[i].bestNs, _ = minMax(samples[i], func(s sample) float64 { return s.ns })
		lo, hi := minMax(samples[i], prim)
		if m := prim(rows[i].med); m > 0 {
			rows[i].spread = (hi - lo) / m
		}
	}
	return rows
}

func toSample(sc membench.Scenario, r testing.BenchmarkResult) sample {
	if sc.Heap {
		return sample{ns: r.Extra["ns/key"], allocs: r.Extra["allocs/key"], bytes: r.Extra["bytes/key"]}
	}
	n := float64(r.N)
	return sample{ns: float64(r.T.Nanoseconds()) / n, allocs: float64(r.MemAllocs) / n, bytes: float64(r.MemBytes) / n, cpu: r.Extra["cpu-ns/op"]}
}

func medians(ss []sample) sample {
	return sample{
		ns:     median(ss, func(s sample) float64 { return s.ns }),
		allocs: median(ss, func(s sample) float64 { return s.allocs }),
		bytes:  median(ss, func(s sample) float64 { return s.bytes }),
		cpu:    median(ss, func(s sample) float64 { return s.cpu }),
	}
}

func median[T any](ss []T, f func(T) float64) float64 {
	if len(ss) == 0 {
		return 0
	}
	v := make([]float64, len(ss))
	for i, s := range ss {
		v[i] = f(s)
	}
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

func minMax[T any](ss []T, f func(T) float64) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, s := range ss {
		lo, hi = min(lo, f(s)), max(hi, f(s))
	}
	return lo, hi
}

func (m *memSection) write(w io.Writer, o options) {
	fmt.Fprintf(w, "\n## In memory\n\n")
	fmt.Fprintf(w, "Every implementation is configured to the same limit, %d events per %s with a burst of %d, one decision of cost 1 per call (see `bench/README.md` for what is called):\n", membench.Rate, membench.Period, membench.Rate)
	fmt.Fprintf(w, "sluice `memorystore` (token bucket, bounded to %d keys), `golang.org/x/time/rate` as web frameworks use it (a mutex-protected map of `*rate.Limiter`), sethvargo `memorystore`, ulule with its memory store (fixed window), throttled's GCRA on its `memstore` (an LRU bounded to %d keys, as its README shows).\n\n", membench.MaxKeys, membench.MaxKeys)
	fmt.Fprintf(w, "- each cell is the median of %d runs (%d for the heap) targeting %s each, implementations interleaved and rotated; took %s; 1-minute load average %s\n", o.count, o.heapCount, o.benchtime, m.took.Round(time.Second), m.load)
	fmt.Fprintf(w, "- parallel scenarios use `b.RunParallel` with GOMAXPROCS=%d goroutines; ns/op is wall time per decision across them\n", runtime.GOMAXPROCS(0))
	fmt.Fprintf(w, "- CPU ns/op is the CPU time of the whole process (every goroutine, background work included) per decision: steadier than ns/op on a machine shared with other jobs, since it does not count the waits for a CPU; in the parallel scenarios it is the cost of a decision, not its rate\n")
	fmt.Fprintf(w, "- spread is (max−min)/median over the runs; best is the fastest run, the least disturbed by other load. The last column is sluice's median over the best peer's: below 1× sluice is faster (smaller)\n")
	for _, sc := range m.scs {
		rows := m.scenarioRows(sc.Name)
		self, best := compare(rows)
		fmt.Fprintf(w, "\n### %s\n\n%s\n\n", scenarioHeading(sc, o.heapKeys), scenarioText(sc, o.heapKeys))
		if sc.Heap {
			fmt.Fprintln(w, "| implementation | bytes/key | spread | ns/key (insert) | allocs/key | sluice ÷ smallest peer |")
			fmt.Fprintln(w, "|---|---:|---:|---:|---:|---|")
		} else {
			fmt.Fprintln(w, "| implementation | ns/op | spread | best ns/op | CPU ns/op | allocs/op | B/op | sluice ÷ fastest peer |")
			fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---|")
		}
		for i := range rows {
			r := &rows[i]
			name := "`" + r.impl.Name + "`"
			if !r.impl.Peer {
				name = "**" + name + "**"
			}
			if !r.ok() {
				fmt.Fprintf(w, "| %s | FAILED: %s | | | | | | |\n", name, cell(r.failed))
				continue
			}
			ratio := ""
			if r == self && best != nil {
				ratio = fmt.Sprintf("%.2f× (vs %s)", self.primary()/best.primary(), best.impl.Name)
			}
			if sc.Heap {
				fmt.Fprintf(w, "| %s | %s | %.0f%% | %s | %s | %s |\n", name, num(r.med.bytes), 100*r.spread, num(r.med.ns), num(r.med.allocs), ratio)
			} else {
				fmt.Fprintf(w, "| %s | %s | %.0f%% | %s | %s | %s | %s | %s |\n", name, num(r.med.ns), 100*r.spread, num(r.bestNs), num(r.med.cpu), perOp(r.med.allocs, "%.2f"), perOp(r.med.bytes, "%.0f"), ratio)
			}
		}
	}
}

func scenarioHeading(sc membench.Scenario, heapKeys int) string {
	if sc.Heap {
		return fmt.Sprintf("Heap per key (%s keys)", humanCount(heapKeys))
	}
	return strings.ToUpper(sc.Title[:1]) + sc.Title[1:]
}

func scenarioText(sc membench.Scenario, heapKeys int) string {
	switch sc.Name {
	case "HotKeySerial":
		return fmt.Sprintf("One key, one goroutine. After the first %d decisions almost every one is a denial: the deny path of a hot, existing key.", membench.Rate)
	case "HotKeyParallel":
		return "One key from every goroutine at once: the contention of one hot key, again mostly denials."
	case "Keys100kSerial":
		return fmt.Sprintf("%s existing keys (each used once before the timer starts) walked in order by one goroutine: the admit path, key lookup over a table larger than the CPU caches.", humanCount(membench.ParallelKeys))
	case "Keys100kParallel":
		return fmt.Sprintf("The same %s keys walked by every goroutine, each from its own random offset.", humanCount(membench.ParallelKeys))
	case "HeapPerKey":
		return fmt.Sprintf("%s distinct keys inserted once each into a fresh limiter, background cleanup off; bytes/key is the growth of the live heap after GC per resident key (the key strings themselves excluded: a limiter that copies or prefixes them pays for its copy).", humanCount(heapKeys))
	}
	return sc.Title
}

// cell makes s safe for a table cell.
func cell(s string) string { return strings.ReplaceAll(firstLine(s), "|", "/") }

func perOp(v float64, format string) string {
	if v < 0.005 {
		return "0"
	}
	return fmt.Sprintf(format, v)
}

func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.Abs(v) < 0.01:
		return fmt.Sprintf("%.4f", v)
	case math.Abs(v) < 10:
		return fmt.Sprintf("%.2f", v)
	case math.Abs(v) < 1000:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

func humanCount(n int) string {
	switch {
	case n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}
