package main

import (
	"fmt"
	"io"
	"runtime"
)

// target is one of the targets the benchmarks are held to, evaluated on
// this run.
type target struct {
	name     string  // what is compared
	goal     string  // e.g. "< 1×"
	ratio    float64 // sluice ÷ reference, in the metric of the goal
	measured string  // the figures behind the ratio
	met      bool
	close    bool   // the runs of the two overlap: the verdict may flip on a rerun
	why      string // where the difference comes from
	missing  string // why it could not be evaluated, if so
	chart    string // the label of its bar in the chart, if it has one
}

func (t target) verdict() string {
	switch {
	case t.missing != "":
		return "not measured"
	case t.met && t.close:
		return "met (runs overlap)"
	case t.met:
		return "met"
	case t.close:
		return "not met (runs overlap)"
	}
	return "not met"
}

// Goals of the targets.
const (
	ceilingGoal = 0.8 // sluice's Redis store ÷ redis-benchmark
)

// targets evaluates the targets on the results present.
func (r *report) targets() []target {
	var out []target
	if r.mem != nil {
		out = append(out, r.mem.targets()...)
	}
	for _, m := range []*mwSection{r.mw, r.fiber} {
		if m != nil {
			out = append(out, m.target())
		}
	}
	if r.redis != nil {
		out = append(out, r.redis.targets()...)
	}
	if r.churn != nil {
		out = append(out, r.churn.target())
	}
	if r.service != nil {
		out = append(out, r.service.targets()...)
	}
	if r.ruleChurn != nil {
		out = append(out, r.ruleChurn.targets()...)
	}
	if r.prop != nil {
		out = append(out, r.prop.targets()...)
	}
	if r.rules != nil {
		out = append(out, r.rules.target())
	}
	if r.lease != nil {
		out = append(out, r.lease.targets()...)
	}
	return out
}

// targets are the in-memory throughput scenarios' targets: sluice faster
// than the fastest peer (the heap scenario has none).
func (m *memSection) targets() []target {
	var out []target
	for _, sc := range m.scs {
		if sc.Heap {
			continue
		}
		t := target{name: "in memory, " + sc.Title + ": sluice faster than the fastest peer", goal: "< 1×"}
		self, best := compare(m.scenarioRows(sc.Name))
		if self == nil {
			t.missing = "sluice or every peer failed or was not run"
			out = append(out, t)
			continue
		}
		t.ratio = self.med.ns / best.med.ns
		t.met = t.ratio < 1
		t.close = (t.met && self.med.ns > best.bestNs) || (!t.met && self.bestNs < best.med.ns)
		t.measured = fmt.Sprintf("sluice %s ns/op vs %s %s ns/op", num(self.med.ns), best.impl.Name, num(best.med.ns))
		t.why = fmt.Sprintf("allocs/op %s vs %s; spread %.0f%% vs %.0f%%", perOp(self.med.allocs, "%.2f"), perOp(best.med.allocs, "%.2f"), 100*self.spread, 100*best.spread)
		if self.med.cpu > 0 && best.med.cpu > 0 {
			t.why += fmt.Sprintf("; CPU per decision %s vs %s ns (%.2f×)", num(self.med.cpu), num(best.med.cpu), self.med.cpu/best.med.cpu)
		}
		out = append(out, t)
	}
	return out
}

// label names m's framework: net/http or Fiber.
func (m *mwSection) label() string {
	if m.scenario == fiberScenario {
		return "Fiber"
	}
	return "net/http"
}

// target is the middleware's target: sluice's overhead below every
// peer's.
func (m *mwSection) target() target {
	t := target{name: m.label() + " middleware: sluice's overhead below every peer's", goal: "< 1×"}
	self, peer := m.find("sluice"), m.fastestPeer()
	so, sok := sample{}, false
	po, pok := sample{}, false
	if self != nil {
		so, sok = m.overhead(self)
	}
	if peer != nil {
		po, pok = m.overhead(peer)
	}
	if !sok || !pok || po.ns <= 0 {
		t.missing = "sluice, the baseline or every peer failed or was not run"
		return t
	}
	t.ratio = so.ns / po.ns
	t.met = t.ratio < 1
	base := m.base()
	t.close = (t.met && self.med.ns > peer.bestNs) || (!t.met && self.bestNs < peer.med.ns)
	t.measured = fmt.Sprintf("sluice +%s ns/request vs %s +%s ns (bare %s ns)", num(so.ns), peer.impl.Name, num(po.ns), num(base.med.ns))
	t.why = fmt.Sprintf("sluice %s allocs, %s B per request vs %s allocs, %s B", perOp(so.allocs, "%.1f"), perOp(so.bytes, "%.0f"), perOp(po.allocs, "%.1f"), perOp(po.bytes, "%.0f"))
	if xrl := m.find("sluice-xrl"); xrl != nil {
		if xo, ok := m.overhead(xrl); ok {
			t.why += fmt.Sprintf("; with the peers' header family only (`sluice-xrl`) +%s ns, %.2f×", num(xo.ns), xo.ns/po.ns)
		}
	}
	return t
}

// targets are the Redis throughput targets: sluice's store ahead of every
// Redis-backed peer, and at least ceilingGoal of the server's ceilings.
func (res *redisSection) targets() []target {
	self := res.find(defaultSluice)
	peer := res.bestPeer()
	t := target{name: "Redis, 64 callers: sluice's store (token bucket, pipelined) ahead of every Redis-backed peer", goal: "> 1×"}
	switch {
	case res.err != nil:
		t.missing = res.err.Error()
	case self == nil || peer == nil:
		t.missing = defaultSluice + " or every peer failed or was not run"
	default:
		t.ratio = self.perSec / peer.perSec
		t.met = t.ratio > 1
		t.close = (t.met && self.perSec < peer.best) || (!t.met && self.best > peer.perSec)
		t.measured = fmt.Sprintf("sluice %.0f decisions/s vs %s %.0f/s", self.perSec, peer.impl.Name, peer.perSec)
		t.why = cpuWhy(self, peer)
	}
	out := []target{t}
	for _, c := range []struct{ name, label string }{
		{"redis-benchmark", "redis-benchmark -c 64: one request in flight per connection, as a caller has"},
		{"redis-benchmark-P16", "redis-benchmark -c 64 -P 16: pipelined, the stricter reading"},
	} {
		out = append(out, res.ceilingTarget(self, c.name, c.label))
	}
	return out
}

// ceilingTarget is the target of self, sluice's store, at least
// ceilingGoal of the ceiling row name (described by label).
func (res *redisSection) ceilingTarget(self *redisRow, name, label string) target {
	ceil := res.find(name)
	t := target{name: "Redis, 64 callers: sluice's store at least 0.8× the server's own ceiling (" + label + "; the same script as `evalsha`)", goal: "≥ 0.80×"}
	switch {
	case res.err != nil:
		t.missing = res.err.Error()
	case self == nil || ceil == nil:
		t.missing = defaultSluice + " or " + name + " failed or was not run"
	default:
		t.ratio = self.perSec / ceil.perSec
		t.met = t.ratio >= ceilingGoal
		t.close = (t.met && self.perSec < ceilingGoal*ceil.best) || (!t.met && self.best >= ceilingGoal*ceil.perSec)
		t.measured = fmt.Sprintf("sluice %.0f decisions/s vs %s %.0f requests/s", self.perSec, name, ceil.perSec)
		t.why = cpuWhy(self, ceil)
		t.why += fmt.Sprintf("; server time inside the script %.1f µs vs %.1f µs per decision", self.scriptUs, ceil.scriptUs)
	}
	return t
}

// cpuWhy says where the CPU of one decision goes for a and b.
func cpuWhy(a, b *redisRow) string {
	return fmt.Sprintf("CPU per decision: client %.1f µs vs %.1f µs, redis-server %.1f µs vs %.1f µs (%.1f vs %.1f commands per round trip); client and server share %d CPUs",
		a.clientUs, b.clientUs, a.serverUs, b.serverUs, a.perTrip, b.perTrip, runtime.NumCPU())
}

func (r *report) writeSummary(w io.Writer) {
	ts := r.targets()
	fmt.Fprintf(w, "\n## Targets\n\n")
	if len(ts) == 0 {
		fmt.Fprintln(w, "No scenario with a target was run.")
	} else {
		fmt.Fprintln(w, "| target | ratio | goal | result | measured (medians) | where the difference comes from |")
		fmt.Fprintln(w, "|---|---:|---|---|---|---|")
		for _, t := range ts {
			if t.missing != "" {
				fmt.Fprintf(w, "| %s | — | %s | not measured | %s | |\n", t.name, t.goal, cell(t.missing))
				continue
			}
			v := t.verdict()
			if t.met {
				v = "**" + v + "**"
			}
			fmt.Fprintf(w, "| %s | %.2f× | %s | %s | %s | %s |\n", t.name, t.ratio, t.goal, v, t.measured, t.why)
		}
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Ratios are sluice's median over the reference's: for time and overhead below 1× is better, for throughput above. \"runs overlap\" means the fastest run of the slower side beat the median of the other: on this shared machine a rerun may flip the verdict.")
		fmt.Fprintln(w, "The service's ratios are the median of ratios computed within each interleaved round (their range in the measured column), and \"runs overlap\" there means the rounds (or runs) fall on both sides of the goal; a goal of \"≥ 1× goal\" is the measured figure ÷ the goal in its name, and a p99 under a bound is the p99 ÷ the bound.")
	}
	if rows := r.chartRows(); len(rows) > 0 && r.opts.out != "" {
		fmt.Fprintf(w, "\n![%s](%s)\n\n", r.chartTitle(), svgName)
		fmt.Fprintln(w, "The chart shows every ratio as sluice's advantage, higher is better for sluice: the reference's time (overhead, bytes) ÷ sluice's, or sluice's throughput ÷ the reference's, on a log scale; a tick marks the target where there is one (green: met, red: not met, grey: no target).")
	}
}

func (r *report) chartTitle() string {
	return "sluice against the best peer and the Redis ceiling (higher is better for sluice)"
}

// chartRows are the ratios of the chart, oriented so that above 1 sluice is
// better.
func (r *report) chartRows() []bar {
	var out []bar
	if r.mem != nil {
		out = append(out, r.mem.chartRows()...)
	}
	for _, m := range []*mwSection{r.mw, r.fiber} {
		if m == nil {
			continue
		}
		if b, ok := m.chartRow(); ok {
			out = append(out, b)
		}
	}
	if r.redis != nil && r.redis.err == nil {
		out = append(out, r.redis.chartRows()...)
	}
	if r.redisMem != nil && r.redisMem.err == nil {
		if self, best := r.redisMem.compare(); self != nil && best != nil && self.s.BytesPerIdentity() > 0 {
			out = append(out, bar{group: "Redis", label: "memory per identity", value: best.s.BytesPerIdentity() / self.s.BytesPerIdentity(), note: "vs " + best.impl.Name + " (bytes)"})
		}
	}
	if r.service != nil {
		out = append(out, r.service.chartRows()...)
	}
	if r.ruleChurn != nil {
		out = append(out, r.ruleChurn.chartRows()...)
	}
	if r.prop != nil {
		out = append(out, r.prop.chartRows()...)
	}
	if r.rules != nil {
		out = append(out, r.rules.chartRows()...)
	}
	return out
}

// chartRows are the in-memory scenarios' bars: the best peer's time (or
// bytes per key) ÷ sluice's.
func (m *memSection) chartRows() []bar {
	var out []bar
	for _, sc := range m.scs {
		self, best := compare(m.scenarioRows(sc.Name))
		if self == nil {
			continue
		}
		b := bar{group: "in memory", label: sc.Title, value: best.primary() / self.primary(), target: 1}
		unit := "time"
		if sc.Heap {
			b.target, unit = 0, "bytes/key"
		}
		b.note = fmt.Sprintf("vs %s (%s)", best.impl.Name, unit)
		out = append(out, b)
	}
	return out
}

// chartRow is the middleware's bar: the fastest peer's overhead ÷
// sluice's; false when either is missing.
func (m *mwSection) chartRow() (bar, bool) {
	self, peer := m.find("sluice"), m.fastestPeer()
	if self == nil || peer == nil {
		return bar{}, false
	}
	so, ok1 := m.overhead(self)
	po, ok2 := m.overhead(peer)
	if !ok1 || !ok2 || so.ns <= 0 || po.ns <= 0 {
		return bar{}, false
	}
	return bar{group: "middleware", label: m.label() + " overhead", value: po.ns / so.ns, target: 1, note: "vs " + peer.impl.Name}, true
}

// chartRows are the Redis throughput bars: sluice's store against the
// best peer and the two ceilings.
func (res *redisSection) chartRows() []bar {
	self := res.find(defaultSluice)
	if self == nil {
		return nil
	}
	var out []bar
	if p := res.bestPeer(); p != nil {
		out = append(out, bar{group: "Redis", label: "64 callers vs best peer", value: self.perSec / p.perSec, target: 1, note: "vs " + p.impl.Name})
	}
	if c := res.find("redis-benchmark"); c != nil {
		out = append(out, bar{group: "Redis", label: "64 callers vs ceiling", value: self.perSec / c.perSec, target: ceilingGoal, note: "vs redis-benchmark -c 64"})
	}
	if c := res.find("redis-benchmark-P16"); c != nil {
		out = append(out, bar{group: "Redis", label: "64 callers vs pipelined ceiling", value: self.perSec / c.perSec, target: ceilingGoal, note: "vs redis-benchmark -c 64 -P 16"})
	}
	return out
}
