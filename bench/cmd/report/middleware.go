package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench/mwbench"
)

// mwImpl is a middleware of either table (net/http or Fiber).
type mwImpl struct {
	Name, Label, Module, Headers string
	Baseline, Peer               bool
	bench                        func(*testing.B)
	failure                      func() string
}

func httpImpls() []mwImpl {
	var out []mwImpl
	for _, im := range mwbench.Impls() {
		out = append(out, mwImpl{Name: im.Name, Label: im.Label, Module: im.Module, Headers: im.Headers, Baseline: im.Baseline, Peer: im.Peer,
			bench: func(b *testing.B) { mwbench.Overhead(b, im) }, failure: mwbench.LastFailure})
	}
	return out
}

func fiberImpls() []mwImpl {
	var out []mwImpl
	for _, im := range mwbench.FiberImpls() {
		out = append(out, mwImpl{Name: im.Name, Label: im.Label, Module: im.Module, Headers: im.Headers, Baseline: im.Baseline, Peer: im.Peer,
			bench: func(b *testing.B) { mwbench.FiberOverhead(b, im) }, failure: mwbench.LastFailure})
	}
	return out
}

// mwRow is the median of the runs of one middleware.
type mwRow struct {
	impl   mwImpl
	med    sample
	bestNs float64
	spread float64
	runs   int
	failed string
}

func (r *mwRow) ok() bool { return r.failed == "" && r.runs > 0 }

// mwSection is one middleware table.
type mwSection struct {
	timing
	scenario string
	rows     []mwRow
}

// runMiddleware runs each implementation count times, interleaved and
// rotated as runScenario does.
func runMiddleware(scenario string, ims []mwImpl, count int, benchtime time.Duration) []mwRow {
	if err := flag.Set("test.benchtime", benchtime.String()); err != nil {
		fatal(err)
	}
	samples := make([][]sample, len(ims))
	failed := make([]string, len(ims))
	for rep := range count {
		for j := range ims {
			i := (j + rep) % len(ims)
			if failed[i] != "" {
				continue
			}
			impl := ims[i]
			runtime.GC()
			r := testing.Benchmark(impl.bench)
			if r.N == 0 {
				if failed[i] = impl.failure(); failed[i] == "" {
					failed[i] = "benchmark failed"
				}
				fmt.Fprintf(os.Stderr, "%s/%s run %d/%d: FAILED: %s\n", scenario, impl.Name, rep+1, count, failed[i])
				continue
			}
			n := float64(r.N)
			s := sample{ns: float64(r.T.Nanoseconds()) / n, allocs: float64(r.MemAllocs) / n, bytes: float64(r.MemBytes) / n}
			samples[i] = append(samples[i], s)
			fmt.Fprintf(os.Stderr, "%s/%s run %d/%d: %.1f ns/op, %.1f allocs/op (N=%d)\n", scenario, impl.Name, rep+1, count, s.ns, s.allocs, r.N)
		}
	}
	rows := make([]mwRow, len(ims))
	for i, impl := range ims {
		rows[i] = mwRow{impl: impl, runs: len(samples[i]), failed: failed[i]}
		if len(samples[i]) == 0 {
			continue
		}
		rows[i].med = medians(samples[i])
		lo, hi := minMax(samples[i], func(s sample) float64 { return s.ns })
		rows[i].bestNs = lo
		if m := rows[i].med.ns; m > 0 {
			rows[i].spread = (hi - lo) / m
		}
	}
	return rows
}

// base returns the baseline row, or nil.
func (m *mwSection) base() *mwRow {
	for i := range m.rows {
		if m.rows[i].impl.Baseline && m.rows[i].ok() {
			return &m.rows[i]
		}
	}
	return nil
}

// overhead returns r's median ns/op, allocs/op and B/op over the baseline's.
func (m *mwSection) overhead(r *mwRow) (sample, bool) {
	b := m.base()
	if b == nil || !r.ok() {
		return sample{}, false
	}
	return sample{ns: r.med.ns - b.med.ns, allocs: r.med.allocs - b.med.allocs, bytes: r.med.bytes - b.med.bytes}, true
}

// find returns the row named name, or nil.
func (m *mwSection) find(name string) *mwRow {
	for i := range m.rows {
		if m.rows[i].impl.Name == name && m.rows[i].ok() {
			return &m.rows[i]
		}
	}
	return nil
}

// fastestPeer returns the peer with the smallest overhead, or nil.
func (m *mwSection) fastestPeer() *mwRow {
	var best *mwRow
	for i := range m.rows {
		r := &m.rows[i]
		if r.impl.Peer && r.ok() && (best == nil || r.med.ns < best.med.ns) {
			best = r
		}
	}
	return best
}

func (m *mwSection) title() string {
	if m.scenario == fiberScenario {
		return "Fiber middleware overhead"
	}
	return "HTTP middleware overhead (net/http)"
}

func (m *mwSection) write(w io.Writer, o options) {
	fmt.Fprintf(w, "\n## %s\n\n", m.title())
	if m.scenario == fiberScenario {
		fmt.Fprintf(w, "Fiber v2 apps with the middleware registered by `app.Use` in front of a bare handler (it only sets status 200), driven through `app.Handler()` (fasthttp) with one reused `RequestCtx` from one goroutine, as a fasthttp server worker reuses it: no network. Each middleware runs on its own in-memory store with a limit of %d requests per %s per client IP, so nothing is denied. sluice's `fiberlimit` and Fiber's own `middleware/limiter` (its default fixed window, and its sliding window).\n\n", mwbench.Rate, mwbench.Period)
	} else {
		fmt.Fprintf(w, "Every middleware wraps the same bare handler (it only writes 200) with a limit of %d requests per %s per client IP, each on its library's memory store, so nothing is denied. `handler.ServeHTTP(w, r)` is called directly from one goroutine with one request (GET, one client IP, no forwarding headers) and one reused ResponseWriter whose header map is cleared before each call, the same for all: the allocations counted are the middleware's own.\n\n", mwbench.Rate, mwbench.Period)
	}
	fmt.Fprintf(w, "- each cell is the median of %d runs of %s, implementations interleaved; took %s; 1-minute load average %s\n", o.count, o.benchtime, m.took.Round(time.Second), m.load)
	fmt.Fprintf(w, "- overhead is the median ns/op (allocs/op, B/op) minus the bare baseline's; the last column is sluice's overhead over the fastest peer's: below 1× sluice adds less\n\n")
	fastest := m.fastestPeer()
	fmt.Fprintln(w, "| implementation | headers on an allowed response | ns/op | spread | best ns/op | overhead ns/op | overhead allocs/op | overhead B/op | sluice overhead ÷ fastest peer's |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---|")
	for i := range m.rows {
		r := &m.rows[i]
		name := fmt.Sprintf("%s (`%s`)", r.impl.Label, r.impl.Name)
		if !r.impl.Peer && !r.impl.Baseline {
			name = "**" + name + "**"
		}
		if !r.ok() {
			fmt.Fprintf(w, "| %s | %s | FAILED: %s | | | | | | |\n", name, r.impl.Headers, cell(r.failed))
			continue
		}
		ov, ok := m.overhead(r)
		ovNs, ovAllocs, ovBytes := "—", "—", "—"
		if ok && !r.impl.Baseline {
			ovNs, ovAllocs, ovBytes = num(ov.ns), perOp(ov.allocs, "%.1f"), perOp(ov.bytes, "%.0f")
		}
		ratio := ""
		if !r.impl.Peer && !r.impl.Baseline && ok && fastest != nil {
			if fo, fok := m.overhead(fastest); fok && fo.ns > 0 {
				ratio = fmt.Sprintf("%.2f× (vs %s)", ov.ns/fo.ns, fastest.impl.Name)
			}
		}
		fmt.Fprintf(w, "| %s | %s | %s | %.0f%% | %s | %s | %s | %s | %s |\n", name, r.impl.Headers, num(r.med.ns), 100*r.spread, num(r.bestNs), ovNs, ovAllocs, ovBytes, ratio)
	}
	fmt.Fprintln(w)
	if m.scenario == fiberScenario {
		fmt.Fprintln(w, "The algorithms differ as the libraries ship them: sluice a token bucket, Fiber a fixed window (default) or a sliding window. Fiber's limiter holds one process-wide mutex around each request's read and write of its storage; the `sluice-xrl` row writes only the X-RateLimit-* family, as Fiber does.")
	} else {
		fmt.Fprintln(w, "The algorithms differ as the libraries ship them: sluice a token bucket, ulule a fixed window, httprate a sliding window counter, throttled GCRA, sethvargo a token bucket. The `sluice-xrl` row is sluice with `httplimit.WithHeaders(ratelimitfields.Config{Omit: Draft | State})`: the same header family as the peers.")
	}
}
