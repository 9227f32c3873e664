package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/servicebench"
)

// Goals of the rule churn targets (decisions do not slow down while rules
// change), churn over none, on a shared machine.
const (
	churnTputGoal = 0.90 // checks/s with one change per second ÷ with none, at least
	churnP99Goal  = 1.25 // p99 with one change per second ÷ with none, at most
)

// ruleChurnSection is the service under rule churn: ratelimitd on Redis
// with its rules file rewritten every second, against no change; and
// ratelimitd on a SQLite rules database written every second, against no
// change.
type ruleChurnSection struct {
	timing
	opts    serviceOptions
	rows    [4]serviceRow // file: none, churn; database: none, churn
	churn   [4][]servicebench.ChurnResult
	version string
	err     error
	dbErr   string // the database variant could not start
}

// churnRows are the rows of the section: source and change.
var churnRows = [4]struct {
	db, churn bool
}{{false, false}, {false, true}, {true, false}, {true, true}}

func (r *report) runRuleChurn() {
	o := r.opts
	// At least two changes per churn run, whatever -servicetime says.
	measure := max(o.serviceTime, 2*servicebench.ChurnInterval+500*time.Millisecond)
	so := serviceOptions{count: o.churnServiceCount, measure: measure, warmup: o.serviceWarm, callers: o.callers, conns: o.serviceConns, dir: o.serviceDir}
	sec := &ruleChurnSection{opts: so}
	r.ruleChurn = sec
	sec.timing = timed(sec.run)
}

func (sec *ruleChurnSection) run() {
	o := sec.opts
	ctx := context.Background()
	im := servicebench.ChurnImpl()
	dbImpl := servicebench.Impl{Name: "ratelimitd-db-memory-native", Server: servicebench.Ratelimitd, Group: servicebench.Native, API: "CheckRateLimit, one check (user=N)", ChecksPerCall: 1}
	for i := range sec.rows {
		sec.rows[i].impl = im
		if churnRows[i].db {
			sec.rows[i].impl = dbImpl
		}
	}
	srv, err := startRedis()
	if err != nil {
		sec.err = err
		fmt.Fprintf(os.Stderr, "%s: %v\n", ruleChurnScenario, err)
		return
	}
	defer srv.Close()
	sec.version = srv.Version(ctx)
	servers := &servicebench.Servers{Redis: srv, GoCommand: servicebench.GoCommand(), ServiceDir: o.dir, Log: os.Stderr}
	defer servers.Close()
	users := servicebench.Users(servicebench.Identities)
	bin, err := servers.Binary(ctx, servicebench.Ratelimitd)
	if err != nil {
		sec.err = err
		return
	}
	db, err := servicebench.StartDBTarget(ctx, bin, o.conns, o.callers, users)
	if err != nil {
		sec.dbErr = err.Error()
		fmt.Fprintf(os.Stderr, "%s: the database variant: %v\n", ruleChurnScenario, err)
		sec.rows[2].failed, sec.rows[3].failed = sec.dbErr, sec.dbErr
	} else {
		defer db.Close()
	}
	for rep := range o.count {
		for j := range sec.rows {
			i := (j + rep) % len(sec.rows)
			if err := sec.runRow(ctx, servers, db, users, rep, i); err != nil {
				sec.err = err
				return
			}
		}
	}
	for i := range sec.rows {
		sec.rows[i].aggregate()
	}
}

// runRow runs row i once, in round rep: against the database target db
// or a fresh rules-file ratelimitd of servers, with or without rule
// changes. A failure is the row's; the error is one that ends the
// section (no ratelimitd to run).
func (sec *ruleChurnSection) runRow(ctx context.Context, servers *servicebench.Servers, db *servicebench.DBTarget, users []string, rep, i int) error {
	o := sec.opts
	row := &sec.rows[i]
	if row.failed != "" || row.skipped != "" {
		return nil
	}
	var t servicebench.Target
	var err error
	closeConns := func() {}
	if churnRows[i].db {
		t = db.Target
	} else {
		t, closeConns, err = servers.Target(ctx, row.impl, o.conns, o.callers, users)
		if errors.Is(err, servicebench.ErrNoRatelimitd) {
			return err
		}
		if err != nil {
			row.failed = err.Error()
			fmt.Fprintf(os.Stderr, "%s/%s: FAILED to start: %v\n", ruleChurnScenario, churnLabel(i), err)
			return nil
		}
	}
	runtime.GC()
	cfg := servicebench.RunConfig{Callers: o.callers, Users: users, Warmup: o.warmup, Duration: o.measure}
	var s servicebench.Sample
	var cr servicebench.ChurnResult
	switch {
	case churnRows[i].churn && churnRows[i].db:
		s, cr, err = servicebench.RunChurnWith(ctx, t, cfg, servicebench.ChurnInterval, db.Changer)
	case churnRows[i].churn:
		s, cr, err = servicebench.RunChurn(ctx, t, cfg, servicebench.ChurnInterval)
	default:
		s, err = servicebench.Run(ctx, t, cfg)
	}
	closeConns()
	if err != nil {
		row.failed = err.Error()
		fmt.Fprintf(os.Stderr, "%s/%s run %d/%d: FAILED: %v\n", ruleChurnScenario, churnLabel(i), rep+1, o.count, err)
		return nil
	}
	row.samples = append(row.samples, s)
	sec.churn[i] = append(sec.churn[i], cr)
	fmt.Fprintf(os.Stderr, "%s/%s run %d/%d: %.0f checks/s, p50 %s p99 %s, server CPU %.1f µs/check; %d changes written, %d applied\n",
		ruleChurnScenario, churnLabel(i), rep+1, o.count, s.PerSec, latency(s.P50, true), latency(s.P99, true), s.PerCheck(s.ServerCPU), cr.Written, cr.Applied)
	return nil
}

func churnLabel(i int) string {
	src := "rules file, ShouldRateLimit, Redis"
	if churnRows[i].db {
		src = "SQLite database, CheckRateLimit, memory store"
	}
	if churnRows[i].churn {
		return src + ": one change per second"
	}
	return src + ": no change"
}

// targets are the churn lines of the summary: throughput and p99, for the
// rules file (the service scenario) and the rules database.
func (sec *ruleChurnSection) targets() []target {
	return append(sec.pairTargets(0, "ratelimitd on Redis, rules file rewritten"), sec.pairTargets(2, "ratelimitd on a SQLite rules database written")...)
}

// pairTargets are the targets of rows i (none) and i+1 (churn).
func (sec *ruleChurnSection) pairTargets(i int, what string) []target {
	tput := target{name: fmt.Sprintf("%s, %d callers: checks/s with one rule change per second at least %.2f× those with none (decisions do not slow down while rules change)", what, sec.opts.callers, churnTputGoal), goal: fmt.Sprintf("≥ %.2f×", churnTputGoal)}
	p99 := target{name: fmt.Sprintf("%s, %d callers: p99 with one rule change per second at most %.2f× that with none", what, sec.opts.callers, churnP99Goal), goal: fmt.Sprintf("≤ %.2f×", churnP99Goal)}
	none, churn := &sec.rows[i], &sec.rows[i+1]
	switch {
	case sec.err != nil:
		tput.missing, p99.missing = sec.err.Error(), sec.err.Error()
		return []target{tput, p99}
	case !none.ok() || !churn.ok():
		why := "a variant failed: " + firstLine(none.failed+churn.failed)
		tput.missing, p99.missing = why, why
		return []target{tput, p99}
	}
	tput.ratio = churn.perSec / none.perSec
	tput.met = tput.ratio >= churnTputGoal
	tput.close = (tput.met && churn.perSec < churnTputGoal*none.best) || (!tput.met && churn.best >= churnTputGoal*none.perSec)
	tput.measured = fmt.Sprintf("%.0f checks/s with changes vs %.0f with none", churn.perSec, none.perSec)
	w, a := sec.changes(i + 1)
	tput.why = fmt.Sprintf("server CPU per check %.1f µs vs %.1f µs; %d rule changes written, %d applied during the measured runs; spread %.0f%% vs %.0f%%",
		churn.serverUs, none.serverUs, w, a, 100*churn.spread, 100*none.spread)
	p99.ratio = float64(churn.p99) / float64(none.p99)
	p99.met = p99.ratio <= churnP99Goal
	p99.measured = fmt.Sprintf("p99 %s vs %s (p50 %s vs %s, p99.9 %s vs %s)", latency(churn.p99, true), latency(none.p99, true),
		latency(churn.p50, true), latency(none.p50, true), latency(churn.p999, true), latency(none.p999, true))
	p99.why = "each change: ratelimitd reads the rules (the file, or the database at its new revision), validates them and puts a new snapshot and limiter in force atomically; checks in flight finish under the old"
	return []target{tput, p99}
}

// changes sums the rule changes written and applied over the runs of row i.
func (sec *ruleChurnSection) changes(i int) (written, applied int64) {
	for _, c := range sec.churn[i] {
		written += c.Written
		applied += c.Applied
	}
	return written, applied
}

func (sec *ruleChurnSection) chartRows() []bar {
	none, churn := &sec.rows[0], &sec.rows[1]
	if sec.err != nil || !none.ok() || !churn.ok() || none.perSec <= 0 {
		return nil
	}
	return []bar{{group: "ratelimitd", label: "checks/s under rule churn", value: churn.perSec / none.perSec, target: churnTputGoal, note: "one change per second vs none"}}
}

func (sec *ruleChurnSection) write(w io.Writer) {
	o := sec.opts
	fmt.Fprintf(w, "\n## ratelimitd: decisions while rules change\n\n")
	if sec.err != nil {
		fmt.Fprintf(w, "Not run: %v\n", sec.err)
		return
	}
	fmt.Fprintf(w, "The service scenario's `ratelimitd-redis` (one ratelimitd process on redis-server %s, `ratelimitd serve --rules FILE … --redis … %s`, which reads its rules file every second; %d callers of `ShouldRateLimit` over %d gRPC connection(s), %d users), measured with no rule change and with **one change per second**: every %s the rules file is replaced (a new file renamed over it, as a GitOps deployment does) with the limit of the rule every check is decided by alternating between %d and %d per second (never reached). After each churn run the original file is restored and the run waits until ratelimitd has applied it and no reload is pending.\n\n",
		sec.version, strings.Join(servicebench.RatelimitdArgs, " "), o.callers, o.conns, servicebench.Identities, servicebench.ChurnInterval, servicebench.Rate, servicebench.ChurnRate)
	fmt.Fprintf(w, "- each cell is the median of %d run(s) of %s after %s of warm-up, the two variants interleaved and rotated each round, on the same process; took %s; 1-minute load average %s; the server, redis-server and the load generator share %d CPUs\n", o.count, o.measure, o.warmup, sec.took.Round(time.Second), sec.load, runtime.NumCPU())
	wr, ap := sec.changes(1)
	dw, da := sec.changes(3)
	fmt.Fprintf(w, "- the same with **a SQLite rules database**: `ratelimitd serve --db file:PATH …` on its memory store (it polls the database revision every 500 ms), loaded with ratelimitd's own `CheckRateLimit` (one check, dimension `%s`, endpoint `%s`); one change per second is `rulesdb.Update` of its one rule (token bucket, %d ↔ %d per second) from the benchmark, the admin API's write\n", servicebench.NativeDimension, servicebench.NativeEndpoint, servicebench.Rate, servicebench.ChurnRate)
	fmt.Fprintf(w, "- rule changes during the measured runs: rules file %d written, %d applied; database %d written, %d applied (`ratelimitd_rules_reloads_total{result=\"ok\"}`; a refused change fails the run)\n\n", wr, ap, dw, da)
	fmt.Fprintln(w, "| rules source, API, store: changes | checks/s | spread | best | p50 | p99 | p99.9 | server CPU µs/check | redis CPU µs/check | load generator CPU µs/check |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for i := range sec.rows {
		r := &sec.rows[i]
		if !r.ok() {
			fmt.Fprintf(w, "| %s | FAILED: %s | | | | | | | | |\n", churnLabel(i), cell(r.failed))
			continue
		}
		fmt.Fprintf(w, "| %s | %.0f | %.0f%% | %.0f | %s | %s | %s | %.1f | %.1f | %.1f |\n", churnLabel(i), r.perSec, 100*r.spread, r.best,
			latency(r.p50, true), latency(r.p99, true), latency(r.p999, true), r.serverUs, r.redisUs, r.loadUs)
	}
	fmt.Fprintf(w, "\nAs a go test benchmark, from `bench/`: `go test -run XXX -bench ServiceRuleChurn -benchtime 150000x .`\n")
}
