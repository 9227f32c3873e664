package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/sluicehq/sluice/bench/propbench"
	"github.com/sluicehq/sluice/bench/servicebench"
)

// Goals of the propagation targets: a rule change in force on every
// instance within a second at the most, and a tenth of that at the median.
const (
	propMaxGoal = time.Second
	propP50Goal = 100 * time.Millisecond
)

// propSection is the propagation area: two ratelimitd instances on one
// PostgreSQL.
type propSection struct {
	timing
	changes int
	res     propbench.Result
	err     error
	apiErr  string // why the changes did not go through the admin API
	// The same with bigRules rules stored (0: not run), bigChanges changes.
	bigRules, bigChanges int
	big                  propbench.Result
	bigErr               error
}

func (r *report) runPropagation() {
	o := r.opts
	sec := &propSection{changes: o.propChanges, bigRules: o.propBigRules, bigChanges: o.propBigChanges}
	r.prop = sec
	sec.timing = timed(func() { sec.run(o.serviceDir) })
}

func (sec *propSection) run(serviceDir string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	servers := &servicebench.Servers{GoCommand: servicebench.GoCommand(), ServiceDir: serviceDir, Log: os.Stderr}
	defer servers.Close()
	bin, err := servers.Binary(ctx, servicebench.Ratelimitd)
	if err != nil {
		sec.err = err
		return
	}
	sec.runOne(ctx, bin)
	if sec.err == nil && sec.bigRules > 1 {
		sec.big, sec.bigErr = runCluster(ctx, bin, sec.bigRules, sec.bigChanges)
		if sec.bigErr != nil {
			fmt.Fprintf(os.Stderr, "%s/rules=%d: FAILED: %v\n", propScenario, sec.bigRules, sec.bigErr)
		} else {
			fmt.Fprintf(os.Stderr, "%s/rules=%d: %d changes: p50 %s, max %s; write p50 %s\n", propScenario, sec.bigRules, len(sec.big.Delays),
				fmtDur(propbench.Quantile(sec.big.Delays, 0.5)), fmtDur(propbench.Quantile(sec.big.Delays, 1)), fmtDur(propbench.Quantile(sec.big.Writes, 0.5)))
		}
	}
}

// runCluster measures changes changes on a cluster of n rules.
func runCluster(ctx context.Context, bin string, n, changes int) (propbench.Result, error) {
	c, err := propbench.StartClusterRules(ctx, bin, n)
	if err != nil {
		return propbench.Result{}, err
	}
	defer c.Close()
	return c.Run(ctx, propbench.Config{Changes: changes, Timeout: 30 * time.Second})
}

func (sec *propSection) runOne(ctx context.Context, bin string) {
	c, err := propbench.StartCluster(ctx, bin)
	if err != nil {
		sec.err = err
		fmt.Fprintf(os.Stderr, "%s: %v\n", propScenario, err)
		return
	}
	defer c.Close()
	if ok, err := c.API(ctx); !ok {
		sec.apiErr = "GET /api/v1/rules/{id} on instance A does not answer 200"
		if err != nil {
			sec.apiErr = err.Error()
		}
	}
	sec.res, sec.err = c.Run(ctx, propbench.Config{Changes: sec.changes})
	if sec.err != nil {
		fmt.Fprintf(os.Stderr, "%s: FAILED: %v\n", propScenario, sec.err)
		return
	}
	fmt.Fprintf(os.Stderr, "%s: %d changes (%s): p50 %s, p90 %s, max %s; write p50 %s\n", propScenario, len(sec.res.Delays), sec.res.Via,
		fmtDur(sec.q(0.5)), fmtDur(sec.q(0.9)), fmtDur(sec.q(1)), fmtDur(propbench.Quantile(sec.res.Writes, 0.5)))
}

func (sec *propSection) q(q float64) time.Duration { return propbench.Quantile(sec.res.Delays, q) }

func (sec *propSection) targets() []target {
	mx := target{name: fmt.Sprintf("ratelimitd on PostgreSQL, propagation: max time from a rule change's response to the first decision under it on another instance, over %d changes, under %s", sec.changes, propMaxGoal), goal: "< 1×"}
	p50 := target{name: fmt.Sprintf("ratelimitd on PostgreSQL, propagation: p50 of the same under %s", propP50Goal), goal: "< 1×"}
	if sec.err != nil || len(sec.res.Delays) == 0 {
		why := "no change measured"
		if sec.err != nil {
			why = sec.err.Error()
		}
		mx.missing, p50.missing = why, why
		return []target{mx, p50}
	}
	mx.ratio = float64(sec.q(1)) / float64(propMaxGoal)
	mx.met = mx.ratio < 1
	mx.measured = fmt.Sprintf("max %s, p99 %s over %d changes", fmtDur(sec.q(1)), fmtDur(sec.q(0.99)), len(sec.res.Delays))
	mx.why = "written by " + string(sec.res.Via)
	p50.ratio = float64(sec.q(0.5)) / float64(propP50Goal)
	p50.met = p50.ratio < 1
	p50.measured = fmt.Sprintf("p50 %s, p90 %s", fmtDur(sec.q(0.5)), fmtDur(sec.q(0.9)))
	p50.why = "B LISTENs for the revision (NOTIFY in the writing transaction) and polls it every 500 ms as the safety net; a change reads only the rows written since the last load (rulesdb incremental loads) and builds a new snapshot and engine"
	return []target{mx, p50}
}

func (sec *propSection) chartRows() []bar {
	if sec.err != nil || len(sec.res.Delays) == 0 || sec.q(0.5) <= 0 {
		return nil
	}
	return []bar{{group: "ratelimitd", label: "propagation p50", value: float64(propP50Goal) / float64(sec.q(0.5)), target: 1, note: "vs 100 ms"}}
}

func (sec *propSection) write(w io.Writer) {
	fmt.Fprintf(w, "\n## ratelimitd: propagation of a rule change between instances\n\n")
	if sec.err != nil && len(sec.res.Delays) == 0 {
		fmt.Fprintf(w, "Not run: %v\n", sec.err)
		return
	}
	fmt.Fprintf(w, "A real PostgreSQL started by the report (initdb into a temporary directory, postgres on a free loopback port, fsync off) and two ratelimitd processes A and B built from this tree, each `ratelimitd serve --db postgres://… --grpc-addr … --http-addr … %s` on its memory store (B learns of a change by LISTEN/NOTIFY and polls the revision every 500 ms as the safety net). One rule (dimension `%s`, endpoint pattern `%s`, token bucket) has its limit changed %d times, alternating %d and %d per second (never reached), each change written by **%s**; right after the write's response the report checks B in a tight loop (`CheckRateLimit` over gRPC, one at a time) until B decides under the new limit, and records the time from the response to that decision. The next change follows after 20 to 40 ms (random, so that the changes fall at every phase of the polls).\n\n",
		joinArgs(servicebench.RatelimitdArgs), propbench.Dimension, propbench.Endpoint, sec.changes, propbench.LimitA, propbench.LimitB, sec.res.Via)
	if sec.apiErr != "" {
		fmt.Fprintf(w, "- the changes could not go through the admin API: %s\n", cell(sec.apiErr))
	}
	fmt.Fprintf(w, "- took %s; 1-minute load average %s; PostgreSQL, both instances and the report share %d CPUs; %d checks made on B\n\n", sec.took.Round(time.Second), sec.load, runtime.NumCPU(), sec.res.Checks)
	fmt.Fprintln(w, "| | changes | p50 | p90 | p99 | max |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|")
	fmt.Fprintf(w, "| write's response → first decision under the new limit on B | %d | %s | %s | %s | %s |\n", len(sec.res.Delays), fmtDur(sec.q(0.5)), fmtDur(sec.q(0.9)), fmtDur(sec.q(0.99)), fmtDur(sec.q(1)))
	wq := func(q float64) string { return fmtDur(propbench.Quantile(sec.res.Writes, q)) }
	fmt.Fprintf(w, "| the write itself | %d | %s | %s | %s | %s |\n", len(sec.res.Writes), wq(0.5), wq(0.9), wq(0.99), wq(1))
	switch {
	case sec.bigRules <= 1:
	case sec.bigErr != nil:
		fmt.Fprintf(w, "| with %s rules stored | FAILED: %s | | | | |\n", humanCount(sec.bigRules), cell(sec.bigErr.Error()))
	default:
		bq := func(ds []time.Duration, q float64) string { return fmtDur(propbench.Quantile(ds, q)) }
		fmt.Fprintf(w, "| with %s rules stored: write's response → first decision on B | %d | %s | %s | %s | %s |\n", humanCount(sec.bigRules), len(sec.big.Delays),
			bq(sec.big.Delays, 0.5), bq(sec.big.Delays, 0.9), bq(sec.big.Delays, 0.99), bq(sec.big.Delays, 1))
		fmt.Fprintf(w, "| with %s rules stored: the write itself | %d | %s | %s | %s | %s |\n", humanCount(sec.bigRules), len(sec.big.Writes),
			bq(sec.big.Writes, 0.5), bq(sec.big.Writes, 0.9), bq(sec.big.Writes, 0.99), bq(sec.big.Writes, 1))
	}
	if sec.bigRules > 1 {
		fmt.Fprintf(w, "\nThe last rows: the same cluster with %s rules stored (rulesbench's, with endpoint patterns the checks do not match, written in one transaction before the instances start), %d changes, no target: every write re-reads and validates the whole rule set in its transaction, and every instance reloads the whole set and builds a new engine on each change, so both grow with the rule count (see the rules-at-scale section).\n", humanCount(sec.bigRules), sec.bigChanges)
	}
	if sec.err != nil {
		fmt.Fprintf(w, "\nThe run stopped early: %s\n", cell(sec.err.Error()))
	}
	fmt.Fprintf(w, "\nAs a test (10 changes each way, bounded): `cd bench && go test -run TestPropagation -v ./propbench`.\n")
}

func joinArgs(a []string) string {
	out := ""
	for i, s := range a {
		if i > 0 {
			out += " "
		}
		out += s
	}
	return out
}
