package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/sluicehq/sluice/bench/leasebench"
	"github.com/sluicehq/sluice/bench/redisbench"
	"github.com/sluicehq/sluice/core"
)

// Goals of the lease targets (the leased-quota issue), leased over exact on
// one run.
const (
	leaseCallsGoal   = 0.01 // Redis calls per leased decision, at most
	leaseCPUGoal     = 0.05 // Redis CPU per decision, leased ÷ exact, at most
	leaseFleetGoal   = 20.0 // fleet decisions/s, leased ÷ exact, at least
	leaseLatencyGoal = 1.5  // leased latency ÷ the memory store's, at most
	leaseGlobalGoal  = 0.01 // |admitted − limit| ÷ limit per second, at most
	leaseShareGoal   = 0.01 // share of the global limit's decisions Redis serves, at most
)

// leaseAlgorithms are the algorithms a lease takes, in the Pareto table.
var leaseAlgorithms = []core.Algorithm{core.FixedWindow, core.SlidingWindowCounter, core.TokenBucket, core.LeakyBucket, core.GCRA}

// leaseSection is the lease layer against the exact path.
type leaseSection struct {
	timing
	quick   bool
	version string
	hot     [2]leasebench.HotKeyResult // exact, leased
	hotCfg  leasebench.HotKeyConfig
	lat     leasebench.LatencyResult
	global  leasebench.GlobalResult
	pareto  []leasebench.ParetoResult
	paretoC leasebench.ParetoConfig
	outage  leasebench.OutageResult
	errs    map[string]error // by part: hot, latency, global, pareto, outage
}

func (r *report) runLease() {
	sec := &leaseSection{quick: r.opts.quick, errs: map[string]error{}, hotCfg: leasebench.DefaultHotKey, paretoC: leasebench.DefaultPareto}
	r.lease = sec
	sec.timing = timed(sec.run)
}

func (sec *leaseSection) run() {
	ctx := context.Background()
	global := leasebench.DefaultGlobal
	if sec.quick {
		sec.hotCfg.Duration, global.Duration = 500*time.Millisecond, 2500*time.Millisecond
		sec.paretoC.Scale.ManyClients, sec.paretoC.Scale.ManyPeriods = 2000, 10
	}
	srv, err := startRedis()
	if err != nil {
		for _, p := range []string{"hot", "latency", "global", "outage"} {
			sec.errs[p] = err
		}
	} else {
		defer srv.Close()
		sec.version = srv.Version(ctx)
		sec.runRedis(ctx, srv, global)
	}
	for _, a := range leaseAlgorithms {
		p, err := leasebench.RunPareto(ctx, a, sec.paretoC)
		if err != nil {
			sec.errs["pareto"] = err
			break
		}
		fmt.Fprintf(os.Stderr, "%s/pareto/%s: %.3f store calls per decision, %.2f%% fewer admitted\n", leaseScenario, a, p.CallsPerDecision(), 100*p.UnderAdmission())
		sec.pareto = append(sec.pareto, p)
	}
	bin, err := redisbench.FindBinary(redisbench.ServerEnv, "redis-server")
	if err == nil {
		sec.outage, err = leasebench.RunOutage(ctx, bin, 4, 300*time.Millisecond, 300*time.Millisecond)
	}
	sec.errs["outage"] = err
}

// runRedis runs the parts on srv: the hot key (exact, then leased), the
// latency, the global limit.
func (sec *leaseSection) runRedis(ctx context.Context, srv *redisbench.Server, global leasebench.GlobalConfig) {
	for i, mode := range []string{"exact", "leased"} {
		r, err := leasebench.RunHotKey(ctx, srv, mode, sec.hotCfg)
		if err != nil {
			sec.errs["hot"] = err
			break
		}
		sec.hot[i] = r
		fmt.Fprintf(os.Stderr, "%s/hotkey/%s: %.0f decisions/s, %.4f Redis calls per decision\n", leaseScenario, mode, r.PerSecond(), r.CallsPerDecision())
	}
	n := 2_000_000
	if sec.quick {
		n = 300_000
	}
	sec.lat, sec.errs["latency"] = leasebench.RunLatency(ctx, srv, n)
	sec.global, sec.errs["global"] = leasebench.RunGlobal(ctx, srv, global)
	if sec.errs["global"] == nil && !sec.global.Reached() {
		// The machine cannot offer the seed's rate: run the same fleet at
		// half of what it offers, where the limit binds.
		scaled := global
		scaled.Rate = int64(sec.global.Offered() / 2)
		sec.global, sec.errs["global"] = leasebench.RunGlobal(ctx, srv, scaled)
	}
}

// targets are the targets on this run.
func (sec *leaseSection) targets() []target {
	var out []target
	exact, leased := sec.hot[0], sec.hot[1]
	hot := func(name, goal string, ratio float64, met bool, measured string) {
		t := target{name: "leases, one hot identity, 4 processes on one Redis: " + name, goal: goal, ratio: ratio, met: met, measured: measured}
		if err := sec.errs["hot"]; err != nil {
			t.missing = err.Error()
		}
		out = append(out, t)
	}
	hot("Redis calls per leased decision", "≤ 0.01", leased.CallsPerDecision(), leased.CallsPerDecision() <= leaseCallsGoal,
		fmt.Sprintf("leased %.5f, exact %.3f calls per decision", leased.CallsPerDecision(), exact.CallsPerDecision()))
	cpu := float64(leased.CPUPerDecision()) / float64(max(exact.CPUPerDecision(), 1))
	hot("Redis CPU per decision, leased ÷ exact", "≤ 0.05×", cpu, cpu <= leaseCPUGoal,
		fmt.Sprintf("leased %s, exact %s per decision", leased.CPUPerDecision(), exact.CPUPerDecision()))
	fleet := leased.PerSecond() / max(exact.PerSecond(), 1)
	hot("fleet decisions/s, leased ÷ exact", "≥ 20×", fleet, fleet >= leaseFleetGoal,
		fmt.Sprintf("leased %.0f/s, exact %.0f/s", leased.PerSecond(), exact.PerSecond()))
	lt := target{name: "leases: a leased decision's latency ÷ the memory store's (one goroutine, hot key)", goal: "≤ 1.5×", ratio: sec.lat.Ratio(), met: sec.lat.Ratio() <= leaseLatencyGoal,
		measured: fmt.Sprintf("leased %s, memory %s per decision; %d Redis calls in %d decisions", sec.lat.Leased, sec.lat.Memory, sec.lat.LeasedCalls, sec.lat.Decisions)}
	if err := sec.errs["latency"]; err != nil {
		lt.missing = err.Error()
	}
	out = append(out, lt)
	g := sec.global
	for _, t := range []target{
		{name: fmt.Sprintf("leases, a global limit of %d/s, %d instances on one Redis: what the fleet admits per second, off the limit by at most", g.Config.Rate, g.Config.Instances), goal: "≤ 1%",
			ratio: g.WorstDeviation() / leaseGlobalGoal, met: g.WorstDeviation() <= leaseGlobalGoal,
			measured: fmt.Sprintf("worst %.3f%% over %d whole seconds %v; offered %.0f/s", 100*g.WorstDeviation(), len(g.PerWindow), g.PerWindow, g.Offered())},
		{name: fmt.Sprintf("leases, a global limit of %d/s: the share of decisions Redis serves", g.Config.Rate), goal: "≤ 1%",
			ratio: g.RedisShare() / leaseShareGoal, met: g.RedisShare() <= leaseShareGoal,
			measured: fmt.Sprintf("%d Redis calls for %d decisions (%.4f%%)", g.RedisCalls, g.Decisions, 100*g.RedisShare())},
	} {
		if err := sec.errs["global"]; err != nil {
			t.missing = err.Error()
		} else if len(g.PerWindow) == 0 {
			t.missing = "no whole second in the run"
		}
		out = append(out, t)
	}
	return out
}

const leaseScenario = "Leases"

// write writes the section.
func (sec *leaseSection) write(w io.Writer) {
	fmt.Fprintf(w, "\n## Leases: decisions in memory from blocks of a shared limit\n\n")
	fmt.Fprintf(w, "Package `leasebench`, report scenario `%s`, on a redis-server %s the report starts; %s (load %s). The lease layer (`core/lease`) over the Redis store against the Redis store alone, the exact path: every decision a Redis call. See [redis.md, Leases](redis.md#leases) for what a lease is and its bounds.\n\n", leaseScenario, sec.version, sec.took.Round(time.Second), sec.load)
	exact, leased := sec.hot[0], sec.hot[1]
	fmt.Fprintf(w, "### One hot identity, %d processes of %d goroutines on one Redis\n\n", sec.hotCfg.Procs, sec.hotCfg.Goroutines)
	if err := sec.errs["hot"]; err != nil {
		fmt.Fprintf(w, "Failed: %s\n\n", cell(err.Error()))
	} else {
		fmt.Fprintln(w, "| path | decisions/s (fleet) | Redis calls per decision | Redis CPU per decision |")
		fmt.Fprintln(w, "|---|---:|---:|---:|")
		for _, r := range []leasebench.HotKeyResult{exact, leased} {
			fmt.Fprintf(w, "| %s | %.0f | %.5f | %s |\n", r.Mode, r.PerSecond(), r.CallsPerDecision(), r.CPUPerDecision())
		}
		fmt.Fprintf(w, "\nEach process is this program run again (its own Redis client, pool and scheduler); they decide one identity under a fixed window of 10^11 per second, never reached, for %s. Leased: `Lease: %s`. Redis calls are the FCALL, EVALSHA and EVAL calls the server counted (a pipeline of an exact path's concurrent decisions is one FCALL); its CPU is every thread's (`INFO cpu`). The processes and redis-server share %s.\n\n", sec.hotCfg.Duration, sec.hotCfg.Hold, cpusLine())
	}
	sec.writeGlobal(w)
	sec.writePareto(w)
	fmt.Fprintf(w, "### Redis killed under a leased instance\n\n")
	if err := sec.errs["outage"]; err != nil {
		fmt.Fprintf(w, "Failed: %s\n\n", cell(err.Error()))
	} else {
		o := sec.outage
		fmt.Fprintf(w, "One instance (lease layer over a fail-closed guard over the Redis store; four goroutines; `Lease: 300ms`) deciding a key at full speed; redis-server killed after 300 ms: **%d decisions went on from the blocks held**, exactly (units Redis had counted), for %s after the kill; then the guard's fail-closed mode answered (%d decisions counted after).\n\n", o.Held, o.HeldFor.Round(time.Millisecond), o.FailedClosed)
	}
}

func (sec *leaseSection) writeGlobal(w io.Writer) {
	g := sec.global
	fmt.Fprintf(w, "### A global limit (the seed's L1 rule), %d instances on one Redis\n\n", g.Config.Instances)
	if err := sec.errs["global"]; err != nil {
		fmt.Fprintf(w, "Failed: %s\n\n", cell(err.Error()))
		return
	}
	note := ""
	if g.Config.Rate != leasebench.DefaultGlobal.Rate {
		note = fmt.Sprintf(" This machine could not offer the seed's %d per second (the fleet offered less): the run shown is at %d per second, half of what it offered, where the limit binds.", leasebench.DefaultGlobal.Rate, g.Config.Rate)
	}
	fmt.Fprintf(w, "%d lease layers (each its own Redis client and store, as processes have) of %d goroutines decide one identity for everyone under a fixed window of %d per second, `Lease: %s`, for %s: they offered %.0f decisions/s; admitted per whole second: %v (the limit %d); Redis served %d calls, %.4f%% of the decisions.%s\n\n",
		g.Config.Instances, g.Config.Goroutines, g.Config.Rate, g.Config.Hold, g.Config.Duration, g.Offered(), g.PerWindow, g.Config.Rate, g.RedisCalls, 100*g.RedisShare(), note)
}

func (sec *leaseSection) writePareto(w io.Writer) {
	c := sec.paretoC
	fmt.Fprintf(w, "### Many identities (the accuracy study's many-clients trace)\n\n")
	if err := sec.errs["pareto"]; err != nil {
		fmt.Fprintf(w, "Failed: %s\n\n", cell(err.Error()))
		return
	}
	fmt.Fprintf(w, "%d clients of Pareto-distributed rates (median a tenth of the limit, the heaviest 20×) under a limit of %d per %s for %d periods, each request sent to one of %d lease layers at random (`Lease: %s`), replayed on a manual clock over a memory store; the exact path is one store deciding every request. Store calls are what a Redis store would serve: takes, exact decisions and give-backs.\n\n",
		c.Scale.ManyClients, c.Limit.Rate, c.Limit.Period, c.Scale.ManyPeriods, c.Instances, c.Hold)
	fmt.Fprintln(w, "| algorithm | requests | admitted exact | admitted leased | fewer admitted | store calls per decision | over the limit |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
	for _, p := range sec.pareto {
		fmt.Fprintf(w, "| %s | %d | %d | %d | %.2f%% | %.3f | %d |\n", p.Algorithm, p.Requests, p.Exact, p.Leased, 100*p.UnderAdmission(), p.CallsPerDecision(), p.Over)
	}
	fmt.Fprintln(w, "\nMost identities are far under their limit: their blocks never grow past the request (a bucket's under its rate cannot) and they are decided one store call each, as without a lease; the heavy ones are decided in memory.")
	fmt.Fprintln(w)
}

// cpusLine names the machine's CPUs.
func cpusLine() string { return fmt.Sprintf("%d CPUs", runtime.NumCPU()) }
