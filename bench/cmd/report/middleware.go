package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench/mwbench"
)

// mwRow is the median of the runs of one middleware.
type mwRow struct {
	impl   mwbench.Impl
	med    sample
	bestNs float64
	spread float64
	runs   int
	failed string
}

// runMiddleware runs mwbench.Overhead count times per implementation,
// interleaved and rotated as runScenario does.
func runMiddleware(ims []mwbench.Impl, count int, benchtime time.Duration) []mwRow {
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
			r := testing.Benchmark(func(b *testing.B) { mwbench.Overhead(b, impl) })
			if r.N == 0 {
				if failed[i] = mwbench.LastFailure(); failed[i] == "" {
					failed[i] = "benchmark failed"
				}
				fmt.Fprintf(os.Stderr, "%s/%s run %d/%d: FAILED: %s\n", middlewareScenario, impl.Name, rep+1, count, failed[i])
				continue
			}
			n := float64(r.N)
			s := sample{ns: float64(r.T.Nanoseconds()) / n, allocs: float64(r.MemAllocs) / n, bytes: float64(r.MemBytes) / n}
			samples[i] = append(samples[i], s)
			fmt.Fprintf(os.Stderr, "%s/%s run %d/%d: %.1f ns/op, %.1f allocs/op (N=%d)\n", middlewareScenario, impl.Name, rep+1, count, s.ns, s.allocs, r.N)
		}
	}
	rows := make([]mwRow, len(ims))
	for i, impl := range ims {
		rows[i] = mwRow{impl: impl, runs: len(samples[i]), failed: failed[i]}
		ss := samples[i]
		if len(ss) == 0 {
			continue
		}
		rows[i].med = sample{
			ns:     median(ss, func(s sample) float64 { return s.ns }),
			allocs: median(ss, func(s sample) float64 { return s.allocs }),
			bytes:  median(ss, func(s sample) float64 { return s.bytes }),
		}
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, s := range ss {
			lo, hi = min(lo, s.ns), max(hi, s.ns)
		}
		rows[i].bestNs = lo
		if m := rows[i].med.ns; m > 0 {
			rows[i].spread = (hi - lo) / m
		}
	}
	return rows
}

func printMiddleware(w io.Writer, rows []mwRow, count int, benchtime time.Duration, took time.Duration, load string) {
	fmt.Fprintf(w, "\n### HTTP middleware overhead (in memory)\n\n")
	fmt.Fprintf(w, "- every middleware wraps the same bare handler (it only writes 200) with a limit of %d requests per %s per client IP, each on its library's memory store; never denied\n", mwbench.Rate, mwbench.Period)
	fmt.Fprintf(w, "- `handler.ServeHTTP(w, r)` called directly from one goroutine: one request (GET, one client IP, no forwarding headers) and one reused ResponseWriter whose header map is cleared before each call, the same for all\n")
	fmt.Fprintf(w, "- each cell is the median of %d run(s) of %s, implementations interleaved; took %s; 1-minute load average %s\n\n", count, benchtime, took.Round(time.Second), load)

	var base *mwRow
	for i := range rows {
		if rows[i].impl.Baseline && rows[i].failed == "" && rows[i].runs > 0 {
			base = &rows[i]
		}
	}
	over := func(r *mwRow) (ns, allocs float64, ok bool) {
		if base == nil || r.failed != "" || r.runs == 0 {
			return 0, 0, false
		}
		return r.med.ns - base.med.ns, r.med.allocs - base.med.allocs, true
	}
	// The fastest peer by overhead, and the peer with the fewest allocations.
	var fastest, leanest *mwRow
	for i := range rows {
		r := &rows[i]
		if !r.impl.Peer || r.failed != "" || r.runs == 0 {
			continue
		}
		if fastest == nil || r.med.ns < fastest.med.ns {
			fastest = r
		}
		if leanest == nil || r.med.allocs < leanest.med.allocs {
			leanest = r
		}
	}

	fmt.Fprintln(w, "| implementation | headers on an allowed response | ns/op | overhead ns/op | allocs/op | B/op | spread | best ns/op | sluice overhead ÷ fastest peer's (target ≤ 0.70×) | allocs/op vs fewest of a peer |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---|---|")
	for i := range rows {
		r := &rows[i]
		cells := []string{fmt.Sprintf("%s (`%s`)", r.impl.Label, r.impl.Name), r.impl.Headers}
		if r.failed != "" {
			cells = append(cells, "FAILED", "", "", "", "", "", strings.ReplaceAll(r.failed, "|", "/"), "")
			fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
			continue
		}
		ovNs, ovAllocs, ok := over(r)
		ovCell := "—"
		if ok && !r.impl.Baseline {
			ovCell = num(ovNs)
		}
		cells = append(cells, num(r.med.ns), ovCell, perOp(r.med.allocs, "%.2f"), perOp(r.med.bytes, "%.0f"), fmt.Sprintf("%.0f%%", 100*r.spread), num(r.bestNs))
		ratio, allocs := "", ""
		if !r.impl.Peer && !r.impl.Baseline && ok {
			ratio, allocs = "—", "—"
			if fastest != nil {
				if fo, _, fok := over(fastest); fok && fo > 0 {
					ratio = fmt.Sprintf("%.2f× (vs %s)", ovNs/fo, fastest.impl.Name)
				}
			}
			if leanest != nil {
				_, lo, _ := over(leanest)
				allocs = fmt.Sprintf("%s vs %s (%s)", perOp(ovAllocs, "%.0f"), perOp(lo, "%.0f"), leanest.impl.Name)
			}
		}
		cells = append(cells, ratio, allocs)
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "overhead is the median ns/op minus the bare handler's; allocs/op and B/op are per request (the bare handler allocates nothing). spread is (max−min)/median")
	fmt.Fprintln(w, "of ns/op over the runs. The algorithms differ as the libraries ship them: sluice a token bucket, ulule a fixed window, httprate a sliding window counter.")
	fmt.Fprintln(w, "The `sluice-xrl` row is sluice with `httplimit.WithHeaders(HeaderConfig{Omit: Draft | State})`: the same header family as the peers (X-RateLimit-Limit, -Remaining, -Reset).")
	fmt.Fprintln(w, "Fiber's limiter is not in this table (fasthttp, not net/http).")
}
