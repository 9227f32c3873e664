package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/rulesbench"
)

// rulesGoal bounds the decision latency with 100 000 rules over that with
// 10: "no measurable change" on a shared machine.
const rulesGoal = 1.10

// rulesDBUpdates is the number of rule updates timed per size.
const rulesDBUpdates = 3

// rulesRow is one rule count: its check runs, build and database figures.
type rulesRow struct {
	n       int
	runs    []rulesbench.CheckSample
	med     rulesbench.CheckSample
	best    float64 // fastest run, ns/check
	spread  float64
	build   rulesbench.BuildSample
	load    []time.Duration
	update  time.Duration
	failed  string
	dbError string
}

// rulesSection is the rules-at-scale area (ratelimitd's engine and rules
// database, in this process).
type rulesSection struct {
	timing
	count int
	d     time.Duration
	rows  []rulesRow
}

func (sec *rulesSection) run(count int, d time.Duration) {
	sec.count, sec.d = count, d
	ctx := context.Background()
	setups := sec.build(ctx)
	defer closeSetups(setups)
	for rep := range count {
		for j := range sec.rows {
			i := (j + rep) % len(sec.rows)
			row := &sec.rows[i]
			if row.failed != "" {
				continue
			}
			runtime.GC()
			s, err := setups[i].Checks(ctx, d)
			if err != nil {
				row.failed = err.Error()
				fmt.Fprintf(os.Stderr, "%s/rules=%d run %d/%d: FAILED: %v\n", rulesScenario, row.n, rep+1, count, err)
				continue
			}
			row.runs = append(row.runs, s)
			fmt.Fprintf(os.Stderr, "%s/rules=%d run %d/%d: %.0f ns/check, %.1f allocs\n", rulesScenario, row.n, rep+1, count, s.Ns, s.Allocs)
		}
	}
	for i := range sec.rows {
		sec.rows[i].aggregate()
	}
	closeSetups(setups)
	sec.runDB(ctx)
}

// build times the build of a snapshot and an engine of each size, then
// sets up each size's engine for the checks (nil where it failed).
func (sec *rulesSection) build(ctx context.Context) []*rulesbench.Setup {
	setups := make([]*rulesbench.Setup, len(rulesbench.Sizes))
	sec.rows = make([]rulesRow, len(rulesbench.Sizes))
	for i, n := range rulesbench.Sizes {
		row := &sec.rows[i]
		row.n = n
		b, err := rulesbench.Build(ctx, n, 300*time.Millisecond)
		if err != nil {
			row.failed = err.Error()
			fmt.Fprintf(os.Stderr, "%s/rules=%d: FAILED: %v\n", rulesScenario, n, err)
			continue
		}
		row.build = b
		fmt.Fprintf(os.Stderr, "%s/rules=%d: rules.New %s, engine.New %s (%d builds), heap %.1f MB + %.1f MB\n", rulesScenario, n,
			fmtDur(b.Snapshot), fmtDur(b.Engine), b.Builds, b.SnapshotHeap/1e6, b.EngineHeap/1e6)
		if setups[i], err = rulesbench.NewSetup(ctx, n); err != nil {
			row.failed = err.Error()
			fmt.Fprintf(os.Stderr, "%s/rules=%d: FAILED: %v\n", rulesScenario, n, err)
		}
	}
	return setups
}

// closeSetups closes the setups not closed yet.
func closeSetups(setups []*rulesbench.Setup) {
	for i := range setups {
		if setups[i] != nil {
			setups[i].Close()
			setups[i] = nil
		}
	}
}

// aggregate sets row's medians, best run and spread from its runs.
func (row *rulesRow) aggregate() {
	if len(row.runs) == 0 {
		return
	}
	row.med = rulesbench.CheckSample{
		Ns:     median(row.runs, func(s rulesbench.CheckSample) float64 { return s.Ns }),
		Allocs: median(row.runs, func(s rulesbench.CheckSample) float64 { return s.Allocs }),
		Byte:   median(row.runs, func(s rulesbench.CheckSample) float64 { return s.Byte }),
	}
	lo, hi := row.runs[0].Ns, row.runs[0].Ns
	for _, s := range row.runs {
		lo, hi = min(lo, s.Ns), max(hi, s.Ns)
	}
	row.best, row.spread = lo, (hi-lo)/row.med.Ns
}

// runDB fills a SQLite database per size and times its loads and updates.
func (sec *rulesSection) runDB(ctx context.Context) {
	dir, err := os.MkdirTemp("", "sluice-bench-rulesdb-")
	if err != nil {
		for i := range sec.rows {
			sec.rows[i].dbError = err.Error()
		}
		return
	}
	defer os.RemoveAll(dir)
	for i := range sec.rows {
		row := &sec.rows[i]
		path := filepath.Join(dir, fmt.Sprintf("rules-%d.db", row.n))
		if err := rulesbench.FillDB(ctx, path, row.n); err != nil {
			row.dbError = err.Error()
			fmt.Fprintf(os.Stderr, "%s/rules=%d: database: FAILED: %v\n", rulesScenario, row.n, err)
			continue
		}
		for range 3 {
			took, err := rulesbench.LoadDB(ctx, path, row.n)
			if err != nil {
				row.dbError = err.Error()
				break
			}
			row.load = append(row.load, took)
		}
		if row.dbError == "" {
			row.update, err = rulesbench.UpdateDB(ctx, path, row.n, rulesDBUpdates)
			if err != nil {
				row.dbError = err.Error()
			}
		}
		if row.dbError != "" {
			fmt.Fprintf(os.Stderr, "%s/rules=%d: database: FAILED: %s\n", rulesScenario, row.n, row.dbError)
			continue
		}
		fmt.Fprintf(os.Stderr, "%s/rules=%d: database: Open+Load %v, Update %s\n", rulesScenario, row.n, row.load, fmtDur(row.update))
	}
}

func (sec *rulesSection) find(n int) *rulesRow {
	for i := range sec.rows {
		if r := &sec.rows[i]; r.n == n && r.failed == "" && len(r.runs) > 0 {
			return r
		}
	}
	return nil
}

func (sec *rulesSection) extremes() (small, large *rulesRow) {
	return sec.find(rulesbench.Sizes[0]), sec.find(rulesbench.Sizes[len(rulesbench.Sizes)-1])
}

// target is the rules-at-scale line of the summary.
func (sec *rulesSection) target() target {
	small, large := rulesbench.Sizes[0], rulesbench.Sizes[len(rulesbench.Sizes)-1]
	t := target{name: fmt.Sprintf("ratelimitd, rules at scale: engine.Check (memory store) with %s rules within %.2f× of %d rules (no measurable change)", humanCount(large), rulesGoal, small),
		goal: fmt.Sprintf("≤ %.2f×", rulesGoal)}
	s, l := sec.extremes()
	if s == nil || l == nil {
		t.missing = "a size failed or was not run"
		return t
	}
	t.ratio = l.med.Ns / s.med.Ns
	t.met = t.ratio <= rulesGoal
	t.close = (t.met && l.med.Ns > rulesGoal*s.best) || (!t.met && l.best <= rulesGoal*s.med.Ns)
	t.measured = fmt.Sprintf("%.0f ns/check vs %.0f ns/check", l.med.Ns, s.med.Ns)
	t.why = fmt.Sprintf("%.1f vs %.1f allocs, %.0f vs %.0f B per check; loading %s rules: rules.New %s, engine.New %s", l.med.Allocs, s.med.Allocs, l.med.Byte, s.med.Byte,
		humanCount(large), fmtDur(l.build.Snapshot), fmtDur(l.build.Engine))
	return t
}

// chartRow is the rules-at-scale ratio, above 1 better.
func (sec *rulesSection) chartRows() []bar {
	s, l := sec.extremes()
	if s == nil || l == nil || l.med.Ns <= 0 {
		return nil
	}
	return []bar{{group: "ratelimitd", label: "check, 100k rules vs 10", value: s.med.Ns / l.med.Ns, target: 1 / rulesGoal, note: "time with 10 rules ÷ with 100k"}}
}

func (sec *rulesSection) write(w io.Writer) {
	fmt.Fprintf(w, "\n## ratelimitd: rules at scale\n\n")
	fmt.Fprintf(w, "ratelimitd's engine (`service/engine`) on sluice's memory store, in this process, with %d to %s native rules in force. The rules are spread over %d dimensions (%s) and endpoint patterns as a large deployment's would be: the first rule of each dimension applies to every endpoint, every other one has one pattern, service by service (`/api/v1/sS/**`, then `/api/v1/sS/rR/:id` and `/api/v1/sS/rR` for %d resources per service); each is a token bucket of %d per second. The measured check (dimension `%s`, endpoint `%s`, cost 1, over %d users in turn, from one goroutine) matches the same %d rules at every size (the engine keeps a limiter per dimension: the rules of the other dimensions with those patterns are never looked at).\n\n",
		rulesbench.Sizes[0], humanCount(rulesbench.Sizes[len(rulesbench.Sizes)-1]), len(rulesbench.Dimensions), strings.Join(rulesbench.Dimensions, ", "), rulesbench.Resources, rulesbench.Rate,
		rulesbench.Dimension, rulesbench.Endpoint, rulesbench.Users, rulesbench.MatchedRules)
	fmt.Fprintf(w, "- check: median of %d runs of %s per size, sizes interleaved and rotated; build: `rules.New` (validation and indexing of rules already in memory) and `engine.New` on that snapshot (the limiters the engine compiles each time a snapshot is put in force), the mean of repeated builds (at least 2, at least 300 ms); heap: the live heap after GC that one snapshot holds with its rules, and one engine beyond its snapshot\n", sec.count, sec.d)
	fmt.Fprintf(w, "- database: a SQLite file (`rulesdb`, modernc.org/sqlite) filled with the same rules in one transaction; Open + `Source.Load` + Close is what a starting ratelimitd does (the median of 3), Update one rule's limit the write of a `PUT /api/v1/rules/{id}` (the mean of %d: each write validates the whole resulting rule set in its transaction)\n", rulesDBUpdates)
	fmt.Fprintf(w, "- took %s; 1-minute load average %s\n\n", sec.took.Round(time.Second), sec.load)
	fmt.Fprintln(w, "| rules | check ns | spread | best ns | ÷ 10 rules | allocs/check | B/check | rules.New | engine.New | heap: snapshot | heap: engine | DB Open + Load | DB Update |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	small, _ := sec.extremes()
	for _, r := range sec.rows {
		if r.failed != "" {
			fmt.Fprintf(w, "| %d | FAILED: %s | | | | | | | | | | | |\n", r.n, cell(r.failed))
			continue
		}
		ratio := "—"
		if small != nil && len(r.runs) > 0 {
			ratio = fmt.Sprintf("%.2f×", r.med.Ns/small.med.Ns)
		}
		load, update := "—", "—"
		if r.dbError != "" {
			load = "FAILED: " + cell(r.dbError)
		} else if len(r.load) > 0 {
			load = fmtDur(time.Duration(median(r.load, func(d time.Duration) float64 { return float64(d) })))
			update = fmtDur(r.update)
		}
		fmt.Fprintf(w, "| %d | %.0f | %.0f%% | %.0f | %s | %.1f | %.0f | %s | %s | %s | %s | %s | %s |\n", r.n, r.med.Ns, 100*r.spread, r.best, ratio,
			r.med.Allocs, r.med.Byte, fmtDur(r.build.Snapshot), fmtDur(r.build.Engine), mb(r.build.SnapshotHeap), mb(r.build.EngineHeap), load, update)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Matching walks the route trie of the check's dimension along the endpoint's segments and costs the rules found, not the rules stored.")
	fmt.Fprintln(w, "Loading grows with the rule count (linear): most of a database load is reading the rows; the update's time is its transaction re-reading and validating every rule.")
	fmt.Fprintf(w, "As go test benchmarks: `cd service && go test -run XXX -bench Scale -benchmem ./engine ./rulesdb`.\n")
}

// mb formats bytes in MB (kB below 1 MB).
func mb(b float64) string {
	if b < 1e6 {
		return fmt.Sprintf("%.0f kB", b/1e3)
	}
	return fmt.Sprintf("%.1f MB", b/1e6)
}
