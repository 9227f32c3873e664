// Command report runs the benchmarks of module
// github.com/sluicehq/sluice/bench for sluice and its peers several times,
// interleaving the implementations, and prints the medians as Markdown tables
// with the environment and the peers' module versions. Three areas:
//
//   - in memory (package membench): HotKeySerial, Keys100kParallel, HeapPerKey;
//   - HTTP middleware (package mwbench): MiddlewareOverhead;
//   - Redis (package redisbench): Redis64Callers, on a redis-server the
//     report starts and stops itself.
//
// Usage (from the bench directory):
//
//	go run ./cmd/report [-scenarios hot,parallel,heap,middleware,redis] [-impls sluice,ulule,...]
//	    [-count 5] [-heapcount 3] [-benchtime 500ms] [-heapkeys 1000000]
//	    [-rediscount 3] [-redistime 2s] [-rediswarmup 250ms] [-callers 64] [-ceilingn 200000]
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench/membench"
	"github.com/sluicehq/sluice/bench/mwbench"
	"github.com/sluicehq/sluice/bench/redisbench"
)

// Names of the scenarios outside package membench.
const (
	middlewareScenario = "MiddlewareOverhead"
	redisScenario      = "Redis64Callers"
)

func main() {
	fs := flag.NewFlagSet("report", flag.ExitOnError)
	scenarios := fs.String("scenarios", "all", "comma-separated scenarios to run, matched case-insensitively against their names\n(HotKeySerial, Keys100kParallel, HeapPerKey, MiddlewareOverhead, Redis64Callers:\ne.g. hot,parallel,heap,middleware,redis), or all")
	impls := fs.String("impls", "all", "comma-separated implementations to run, or all. A name selects itself and the variants\nnamed after it (sluice selects sluice-xrl and sluice-gcra-nopipe too). In memory: sluice, xrate,\nsethvargo, ulule. Middleware: bare (always run), sluice, sluice-xrl, ulule, httprate. Redis:\nsluice-<algorithm>[-nopipe], ulule, redis_rate, evalsha, redis-benchmark, redis-benchmark-P16")
	count := fs.Int("count", 5, "runs of each in-memory throughput and middleware benchmark; the tables show the medians")
	heapCount := fs.Int("heapcount", 3, "runs of each heap benchmark (its bytes/key barely varies; each run fills -heapkeys keys)")
	benchtime := fs.Duration("benchtime", 500*time.Millisecond, "target duration of each run of the in-memory throughput and middleware scenarios\n(the heap scenario always does one fill per run)")
	heapKeys := fs.Int("heapkeys", membench.HeapKeys, "distinct keys the heap scenario inserts")
	redisCount := fs.Int("rediscount", 3, "runs of each Redis implementation")
	redisTime := fs.Duration("redistime", 2*time.Second, "measured duration of each Redis run")
	redisWarmup := fs.Duration("rediswarmup", 250*time.Millisecond, "unmeasured load before each Redis run (fills the pool, loads the scripts)")
	callers := fs.Int("callers", redisbench.Callers, "concurrent callers of the Redis scenario")
	ceilingN := fs.Int("ceilingn", redisbench.CeilingRequests, "requests (-n) of each redis-benchmark run")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole report to this file")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run ./cmd/report [flags]\n\nRuns the rate-limiter benchmarks and prints Markdown tables.\n\n")
		fs.PrintDefaults()
	}
	_ = fs.Parse(os.Args[1:])
	if fs.NArg() > 0 || *count < 1 || *heapCount < 1 || *benchtime <= 0 || *heapKeys < 1 ||
		*redisCount < 1 || *redisTime <= 0 || *redisWarmup < 0 || *callers < 1 || *ceilingN < 1 {
		fs.Usage()
		os.Exit(2)
	}
	scs, mw, rd, err := selectScenarios(*scenarios)
	if err != nil {
		fatal(err)
	}
	sel, err := newImplFilter(*impls)
	if err != nil {
		fatal(err)
	}
	var memImpls []membench.Impl
	if len(scs) > 0 {
		memImpls = filterImpls(sel, membench.Impls(), func(im membench.Impl) string { return im.Name })
	}
	var mwImpls []mwbench.Impl
	if mw {
		mwImpls = filterImpls(sel, mwbench.Impls(), func(im mwbench.Impl) string { return im.Name })
		if !slices.ContainsFunc(mwImpls, func(im mwbench.Impl) bool { return im.Baseline }) {
			mwImpls = append([]mwbench.Impl{mwbench.Impls()[0]}, mwImpls...) // the baseline always runs
		}
	}
	var rdImpls []redisbench.Impl
	if rd {
		rdImpls = filterImpls(sel, redisbench.Impls(), func(im redisbench.Impl) string { return im.Name })
	}
	if err := sel.unused(); err != nil {
		fatal(err)
	}
	membench.HeapKeys = *heapKeys
	testing.Init() // registers test.benchtime, which testing.Benchmark reads
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatal(err)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}

	start, loadBefore := time.Now(), loadAvg()
	var sections []func(io.Writer)
	if len(scs) > 0 && len(memImpls) > 0 {
		t0, l0 := time.Now(), loadAvg()
		var rows []row
		for _, sc := range scs {
			n := *count
			if sc.Heap {
				n = *heapCount
			}
			rows = append(rows, runScenario(sc, memImpls, n, *benchtime)...)
		}
		took, load := time.Since(t0), l0+" → "+loadAvg()
		sections = append(sections, func(w io.Writer) {
			printMemory(w, rows, scs, *count, *heapCount, *benchtime, *heapKeys, took, load)
		})
	}
	if len(mwImpls) > 0 {
		t0, l0 := time.Now(), loadAvg()
		rows := runMiddleware(mwImpls, *count, *benchtime)
		took, load := time.Since(t0), l0+" → "+loadAvg()
		sections = append(sections, func(w io.Writer) { printMiddleware(w, rows, *count, *benchtime, took, load) })
	}
	if len(rdImpls) > 0 {
		t0, l0 := time.Now(), loadAvg()
		res, err := runRedis(rdImpls, redisOptions{count: *redisCount, measure: *redisTime, warmup: *redisWarmup, callers: *callers, ceilingN: *ceilingN})
		took, load := time.Since(t0), l0+" → "+loadAvg()
		sections = append(sections, func(w io.Writer) { printRedis(w, res, err, took, load) })
	}
	took := time.Since(start)
	var modules []string
	for _, im := range memImpls {
		modules = append(modules, im.Module)
	}
	for _, im := range mwImpls {
		modules = append(modules, im.Module)
	}
	for _, im := range rdImpls {
		modules = append(modules, im.Module)
	}
	printHeader(os.Stdout, modules, took, loadBefore+" → "+loadAvg())
	for _, s := range sections {
		s(os.Stdout)
	}
}

// sample is one run's metrics.
type sample struct {
	ns, allocs, bytes float64 // per op; for the heap scenario per key
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

// primary is the metric the heap scenario compares (bytes/key); the others
// compare time.
func (r row) primary() float64 {
	if r.sc.Heap {
		return r.med.bytes
	}
	return r.med.ns
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
				failed[i] = membench.LastFailure()
				if failed[i] == "" {
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
		rows[i].med = sample{
			ns:     median(samples[i], func(s sample) float64 { return s.ns }),
			allocs: median(samples[i], func(s sample) float64 { return s.allocs }),
			bytes:  median(samples[i], func(s sample) float64 { return s.bytes }),
		}
		prim := func(s sample) float64 { return s.ns }
		if sc.Heap {
			prim = func(s sample) float64 { return s.bytes }
		}
		lo, hi := math.Inf(1), math.Inf(-1)
		rows[i].bestNs = math.Inf(1)
		for _, s := range samples[i] {
			lo, hi = min(lo, prim(s)), max(hi, prim(s))
			rows[i].bestNs = min(rows[i].bestNs, s.ns)
		}
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
	return sample{ns: float64(r.T.Nanoseconds()) / n, allocs: float64(r.MemAllocs) / n, bytes: float64(r.MemBytes) / n}
}

func median(ss []sample, f func(sample) float64) float64 {
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

// printHeader prints the title and the environment every section shares.
func printHeader(w io.Writer, modules []string, took time.Duration, load string) {
	fmt.Fprintf(w, "## sluice benchmarks\n\n")
	fmt.Fprintf(w, "- Go %s, %s/%s, %d CPUs (GOMAXPROCS %d)%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), cpuModel())
	fmt.Fprintf(w, "- modules:")
	var seen []string
	for _, m := range modules {
		if m == "" || slices.Contains(seen, m) {
			continue
		}
		sep := ","
		if len(seen) == 0 {
			sep = ""
		}
		seen = append(seen, m)
		fmt.Fprintf(w, "%s %s %s", sep, m, moduleVersion(m))
	}
	fmt.Fprintf(w, "\n- %s, took %s; 1-minute load average %s (other jobs on this machine compete for its CPUs: see each section's own)\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), took.Round(time.Second), load)
}

func printMemory(w io.Writer, rows []row, scs []membench.Scenario, count, heapCount int, benchtime time.Duration, heapKeys int, took time.Duration, load string) {
	fmt.Fprintf(w, "\n### In memory\n\n")
	fmt.Fprintf(w, "- limit: %d events per %s, burst %d, in memory, for every implementation\n", membench.Rate, membench.Period, membench.Rate)
	fmt.Fprintf(w, "- each cell is the median of %d run(s) (%d for the heap scenario), implementations interleaved; throughput runs target %s each, a heap run inserts %d keys\n", count, heapCount, benchtime, heapKeys)
	fmt.Fprintf(w, "- took %s; 1-minute load average %s\n\n", took.Round(time.Second), load)

	fmt.Fprintln(w, "| scenario | implementation | ns/op | allocs/op | B/op or bytes/key | spread | best ns/op | sluice ÷ fastest peer |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---|")
	for _, sc := range scs {
		var scRows []row
		for _, r := range rows {
			if r.sc.Name == sc.Name {
				scRows = append(scRows, r)
			}
		}
		ratio := ratioCell(scRows)
		title := sc.Title
		if sc.Heap {
			title = fmt.Sprintf("%s (%s keys)", sc.Title, humanCount(heapKeys))
		}
		for _, r := range scRows {
			cells := []string{title, r.impl.Name}
			switch {
			case r.failed != "":
				cells = append(cells, "FAILED", "", "", "", "", strings.ReplaceAll(r.failed, "|", "/"))
			case sc.Heap:
				cells = append(cells,
					fmt.Sprintf("%s per key", num(r.med.ns)),
					fmt.Sprintf("%s per key", num(r.med.allocs)),
					fmt.Sprintf("%s bytes/key", num(r.med.bytes)),
					fmt.Sprintf("%.0f%%", 100*r.spread), num(r.bestNs)+" per key", "")
			default:
				cells = append(cells, num(r.med.ns), perOp(r.med.allocs, "%.2f"), perOp(r.med.bytes, "%.0f")+" B/op", fmt.Sprintf("%.0f%%", 100*r.spread), num(r.bestNs), "")
			}
			if !r.impl.Peer && r.failed == "" {
				cells[len(cells)-1] = ratio
			}
			fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "ns/op and allocs/op are per decision; in the heap rows they are per inserted key, and bytes/key is the growth of the live heap")
	fmt.Fprintln(w, "after GC per resident key (key strings excluded). spread is (max−min)/median over the runs, of ns/op (of bytes/key for the heap);")
	fmt.Fprintln(w, "best ns/op is the fastest run, the least disturbed by other load on a shared machine.")
	fmt.Fprintln(w, "The ratio is sluice's median over the best peer's: time for the throughput scenarios, bytes/key (and time) for the heap; below 1× sluice is better.")
}

// ratioCell compares sluice's medians with the best peer's: time for the
// throughput scenarios; bytes/key, then time, for the heap scenario.
func ratioCell(rows []row) string {
	var self *row
	var peers []*row
	for i := range rows {
		r := &rows[i]
		switch {
		case r.failed != "" || r.runs == 0:
		case r.impl.Peer:
			peers = append(peers, r)
		default:
			self = r
		}
	}
	if self == nil || len(peers) == 0 {
		return "—"
	}
	cmp := func(label string, f func(sample) float64) string {
		best := peers[0]
		for _, p := range peers[1:] {
			if f(p.med) < f(best.med) {
				best = p
			}
		}
		if f(best.med) <= 0 {
			return "—"
		}
		return fmt.Sprintf("%.2f×%s (vs %s)", f(self.med)/f(best.med), label, best.impl.Name)
	}
	ns := func(s sample) float64 { return s.ns }
	if self.sc.Heap {
		return cmp(" bytes", func(s sample) float64 { return s.bytes }) + ", " + cmp(" time", ns)
	}
	return cmp("", ns)
}

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
	case v < 0.01:
		return fmt.Sprintf("%.4f", v)
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	case v < 1000:
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

// moduleVersion reports the version of module path linked into this binary,
// with its replacement if any.
func moduleVersion(path string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	for _, d := range bi.Deps {
		if d.Path != path {
			continue
		}
		if d.Replace != nil {
			return fmt.Sprintf("%s => %s %s", d.Version, d.Replace.Path, d.Replace.Version)
		}
		return d.Version
	}
	return "(not linked)"
}

// loadAvg returns the 1-minute load average from /proc/loadavg, or "?".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "?"
}

// cpuModel returns ", <model name>" from /proc/cpuinfo, or "".
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return ", " + strings.TrimSpace(v)
		}
	}
	return ""
}

// selectScenarios returns the in-memory scenarios selected by spec and
// whether the middleware and Redis scenarios are.
func selectScenarios(spec string) (mem []membench.Scenario, mw, rd bool, err error) {
	all := membench.Scenarios()
	if spec == "all" || spec == "" {
		return all, true, true, nil
	}
	allNames := append(names2(all), middlewareScenario, redisScenario)
	for _, tok := range strings.Split(spec, ",") {
		tok = strings.ToLower(strings.TrimSpace(tok))
		found := false
		for _, sc := range all {
			if strings.Contains(strings.ToLower(sc.Name), tok) {
				found = true
				if !slices.ContainsFunc(mem, func(s membench.Scenario) bool { return s.Name == sc.Name }) {
					mem = append(mem, sc)
				}
			}
		}
		if strings.Contains(strings.ToLower(middlewareScenario), tok) {
			found, mw = true, true
		}
		if strings.Contains(strings.ToLower(redisScenario), tok) {
			found, rd = true, true
		}
		if !found {
			return nil, false, false, fmt.Errorf("-scenarios: %q matches none of %s", tok, strings.Join(allNames, ", "))
		}
	}
	return mem, mw, rd, nil
}

func names2(scs []membench.Scenario) []string {
	out := make([]string, len(scs))
	for i, sc := range scs {
		out[i] = sc.Name
	}
	return out
}

// implFilter is the -impls selection, shared by every section: a token
// selects the implementation of that name and its variants (name-...),
// case-insensitively.
type implFilter struct {
	all  bool
	toks []string
	used map[string]bool
	seen []string // every name offered, for the error message
}

func newImplFilter(spec string) (*implFilter, error) {
	f := &implFilter{used: map[string]bool{}}
	if spec == "all" || spec == "" {
		f.all = true
		return f, nil
	}
	for _, tok := range strings.Split(spec, ",") {
		if tok = strings.ToLower(strings.TrimSpace(tok)); tok != "" {
			f.toks = append(f.toks, tok)
		}
	}
	if len(f.toks) == 0 {
		return nil, fmt.Errorf("-impls: empty")
	}
	return f, nil
}

func (f *implFilter) match(name string) bool {
	f.seen = append(f.seen, name)
	if f.all {
		return true
	}
	ok, name := false, strings.ToLower(name)
	for _, tok := range f.toks {
		if name == tok || strings.HasPrefix(name, tok+"-") {
			f.used[tok], ok = true, true
		}
	}
	return ok
}

// unused reports the tokens that selected nothing in the selected scenarios.
func (f *implFilter) unused() error {
	for _, tok := range f.toks {
		if !f.used[tok] {
			slices.Sort(f.seen)
			return fmt.Errorf("-impls: %q matches no implementation of the selected scenarios (%s)", tok, strings.Join(slices.Compact(f.seen), ", "))
		}
	}
	return nil
}

func filterImpls[T any](f *implFilter, all []T, name func(T) string) []T {
	var out []T
	for _, im := range all {
		if f.match(name(im)) {
			out = append(out, im)
		}
	}
	return out
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "report:", err)
	os.Exit(2)
}
