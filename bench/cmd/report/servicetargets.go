package main

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/bench/servicebench"
)

// Names of the rows the service targets compare.
const (
	envoyDefaultImpl = "envoy-ratelimit-default"
	envoyBestImpl    = "envoy-ratelimit-best"
	floorImpl        = "grpc-floor"
	floorNativeImpl  = "grpc-floor-native"
	ratelimitdRedis  = "ratelimitd-redis"
	ratelimitdMemory = "ratelimitd-memory"
	nativeRedisImpl  = "ratelimitd-redis-native"
	nativeMemoryImpl = "ratelimitd-memory-native"
	httpRedisImpl    = "ratelimitd-redis-http"
	httpMemoryImpl   = "ratelimitd-memory-http"
	remoteImpl       = "remotestore"
	redisStoreImpl   = "redisstore"
)

// The batch rows.
var (
	batchMemoryImpl = fmt.Sprintf("ratelimitd-memory-batch%d", servicebench.BatchSize)
	batchRedisImpl  = fmt.Sprintf("ratelimitd-redis-batch%d", servicebench.BatchSize)
)

// Goals of the service targets: ratelimitd's hot path.
const (
	goalVsBest      = 0.6                  // server CPU per check ÷ envoyproxy/ratelimit's best configuration's, at most
	goalVsFloor     = 1.5                  // server CPU per check ÷ the grpc-go floor's, at most
	goalRedisCPU    = 1.0                  // Redis CPU per check ÷ envoyproxy/ratelimit's best configuration's, at most
	goalHTTP        = 1.3                  // HTTP JSON check's server CPU per check ÷ the native check's, at most
	goalP99         = 5 * time.Millisecond // p99 of one check at 64 callers, under
	goalBatchMemory = 400_000              // CheckRateLimitBatch decisions per server CPU-second, memory, at least
	goalBatchRedis  = 150_000              // the same on Redis
)

// metric is one figure of a run.
type metric struct {
	f    func(servicebench.Sample) float64
	what string // "server CPU per check"
	unit string // "µs"
}

var (
	serverCPU = metric{serverUs, "server CPU per check", "µs"}
	redisCPU  = metric{redisUs, "Redis CPU per check", "µs"}
)

// targets evaluates the service targets, in the order the report lists
// them.
func (sec *serviceSection) targets() []target {
	var out []target
	short := func(t target, label string) target { t.chart = label; return t }
	for _, api := range []struct{ label, short, self, floor string }{
		{"ShouldRateLimit", "ShouldRateLimit", ratelimitdRedis, floorImpl},
		{"native CheckRateLimit", "CheckRateLimit", nativeRedisImpl, floorNativeImpl},
	} {
		out = append(out,
			short(sec.ratioTarget(api.label+" on Redis: ratelimitd's server CPU per check at most 0.6× envoyproxy/ratelimit's best configuration's", api.self, envoyBestImpl, serverCPU, goalVsBest),
				api.short+", server CPU vs envoy best"),
			short(sec.ratioTarget(api.label+" on Redis: ratelimitd's server CPU per check at most 1.5× the bare grpc-go floor's", api.self, api.floor, serverCPU, goalVsFloor),
				api.short+", server CPU vs floor"),
			short(sec.ratioTarget(api.label+" on Redis: Redis CPU per check at most 1.0× envoyproxy/ratelimit's best configuration's", api.self, envoyBestImpl, redisCPU, goalRedisCPU),
				api.short+", Redis CPU vs envoy best"),
			short(sec.p99Target(api.label, api.self), api.short+", p99 vs 5 ms"))
	}
	out = append(out,
		short(sec.ratioTarget("HTTP JSON check on Redis: server CPU per check at most 1.3× the native CheckRateLimit's", httpRedisImpl, nativeRedisImpl, serverCPU, goalHTTP),
			"HTTP JSON vs native, Redis"),
		short(sec.ratioTarget("HTTP JSON check on memory: server CPU per check at most 1.3× the native CheckRateLimit's", httpMemoryImpl, nativeMemoryImpl, serverCPU, goalHTTP),
			"HTTP JSON vs native, memory"),
		short(sec.batchTarget("memory", batchMemoryImpl, goalBatchMemory), "batch of 100, memory"),
		short(sec.batchTarget("Redis", batchRedisImpl, goalBatchRedis), "batch of 100, Redis"))
	return out
}

// prefix of every service target's name.
func (sec *serviceSection) prefix() string {
	return fmt.Sprintf("service, %d callers, ", sec.opts.callers)
}

// missing says why row name has no results ("" if it has).
func (sec *serviceSection) missing(name string) string {
	if sec.err != nil {
		return sec.err.Error()
	}
	r := sec.row(name)
	switch {
	case r == nil:
		return name + " was not run"
	case r.skipped != "":
		return r.skipped
	case r.failed != "":
		return name + " failed: " + r.failed
	case !r.ok():
		return name + " has no run"
	}
	return ""
}

// ratioTarget is m of row self ÷ m of row ref, per round, at most goal.
func (sec *serviceSection) ratioTarget(name, self, ref string, m metric, goal float64) target {
	t := target{name: sec.prefix() + name, goal: fmt.Sprintf("≤ %.2f×", goal)}
	if t.missing = sec.missing(self) + sec.missing(ref); t.missing != "" {
		return t
	}
	a, b := sec.find(self), sec.find(ref)
	sp := roundRatio(a, b, m.f)
	if sp.n == 0 {
		t.missing = "no round ran both " + self + " and " + ref
		return t
	}
	t.ratio, t.met = sp.med, sp.med <= goal
	t.close = sp.lo <= goal && goal <= sp.hi
	fa, fb := a.figure(m.f), b.figure(m.f)
	t.measured = fmt.Sprintf("`%s` %.1f %s vs `%s` %.1f %s; per round %s over %s", self, fa.med, m.unit, ref, fb.med, m.unit, ratioRange(sp), plural(sp.n, "round"))
	t.why = sec.why(a, b, m)
	return t
}

// why says what the two rows of a ratio spend per check.
func (sec *serviceSection) why(a, b *serviceRow, m metric) string {
	if m.what == redisCPU.what {
		return fmt.Sprintf("redis-server's main thread (INFO cpu) per check: %s decides with one script call per check, %s as it does (%s)", a.impl.Name, b.impl.Name, decisionOf(b))
	}
	s := fmt.Sprintf("CPU per check: server %.1f vs %.1f µs, redis-server %.1f vs %.1f µs, load generator %.1f vs %.1f µs",
		a.serverUs, b.serverUs, a.redisUs, b.redisUs, a.loadUs, b.loadUs)
	if b.impl.Config != "" {
		s += " (" + b.impl.Name + ": " + b.impl.Config + ")"
	}
	return s
}

// decisionOf says how row r decides, for a Redis CPU comparison.
func decisionOf(r *serviceRow) string {
	if r.impl.Server == servicebench.EnvoyRatelimit {
		return "INCRBY + EXPIRE of a fixed window, pipelined per request"
	}
	return r.impl.API
}

// plural writes n things.
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// p99Runs writes the range of the runs' own p99s, if there are several.
func (st openStats) p99Runs() string {
	if st.runs < 2 {
		return ""
	}
	return " (runs " + latency(st.p99Lo, true) + "–" + latency(st.p99Hi, true) + ")"
}

// ratioRange writes a per-round range of ratios.
func ratioRange(sp span) string {
	if sp.n < 2 || sp.lo == sp.hi {
		return fmt.Sprintf("%.2f×", sp.med)
	}
	return fmt.Sprintf("%.2f–%.2f×", sp.lo, sp.hi)
}

// p99Target is the p99 of row self's open-loop runs under goalP99.
func (sec *serviceSection) p99Target(label, self string) target {
	o := sec.opts
	t := target{name: fmt.Sprintf("%s%s on Redis: ratelimitd's p99 of one call under %s (open loop: %.0f calls/s offered, at most %d in flight)",
		sec.prefix(), label, goalP99, o.openRate, o.callers), goal: "< 1×"}
	if t.missing = sec.missing(self); t.missing != "" {
		return t
	}
	r := sec.find(self)
	if r.ol.runs == 0 {
		t.missing = self + " has no open-loop run"
		return t
	}
	t.ratio = float64(r.ol.p99) / float64(goalP99)
	t.met = t.ratio < 1
	t.close = r.ol.p99Lo < goalP99 && goalP99 <= r.ol.p99Hi
	t.measured = fmt.Sprintf("p99 %s%s, p50 %s, p99.9 %s at %.0f calls/s, median of %s; from the send %s; all calls together %s",
		latency(r.ol.p99, true), r.ol.p99Runs(), latency(r.ol.p50, true), latency(r.ol.p999, true), r.ol.achieved, plural(r.ol.runs, "run"),
		latency(r.ol.sent99, true), latency(r.ol.all99, true))
	t.why = fmt.Sprintf("closed loop (the machine saturated) p99 %s at %.0f checks/s, where the mean is %d ÷ throughput (Little's law): %s",
		latency(r.p99, true), r.perSec, o.callers, latency(time.Duration(float64(o.callers)/r.perSec*1e9), true))
	return t
}

// batchTarget is the batch row's decisions per server CPU-second, at least
// goal.
func (sec *serviceSection) batchTarget(store, name string, goal float64) target {
	t := target{name: fmt.Sprintf("%sCheckRateLimitBatch of %d on %s: at least %.0fk decisions per second of server CPU", sec.prefix(), servicebench.BatchSize, store, goal/1e3),
		goal: "≥ 1× goal"}
	if t.missing = sec.missing(name); t.missing != "" {
		return t
	}
	r := sec.find(name)
	sp := r.figure(perServerSecond)
	t.ratio, t.met = sp.med/goal, sp.med >= goal
	t.close = sp.lo <= goal && goal <= sp.hi
	t.measured = fmt.Sprintf("%s decisions per server CPU-second over %s, %.0f decisions/s", withRange(span{sp.med / 1e3, sp.lo / 1e3, sp.hi / 1e3, sp.n}, "%.0fk"), plural(sp.n, "run"), r.perSec)
	t.why = fmt.Sprintf("server %.2f µs, redis-server %.2f µs, load generator %.2f µs of CPU per decision", r.serverUs, r.redisUs, r.loadUs)
	return t
}

// find returns the row named name if it has results, or nil.
func (sec *serviceSection) find(name string) *serviceRow {
	if r := sec.row(name); r != nil && r.ok() {
		return r
	}
	return nil
}

func (sec *serviceSection) row(name string) *serviceRow {
	for i := range sec.rows {
		if sec.rows[i].impl.Name == name {
			return &sec.rows[i]
		}
	}
	return nil
}

// chartRows are the service targets as advantages: above 1 better for
// ratelimitd, the target's tick where the goal lies.
func (sec *serviceSection) chartRows() []bar {
	if sec.err != nil {
		return nil
	}
	var out []bar
	for _, t := range sec.targets() {
		if t.missing != "" || t.ratio <= 0 {
			continue
		}
		b := bar{group: "service", value: 1 / t.ratio}
		switch {
		case t.goal == "≥ 1× goal":
			b.value, b.target = t.ratio, 1
		case t.goal == "< 1×":
			b.target = 1
		default:
			var g float64
			fmt.Sscanf(t.goal, "≤ %f×", &g)
			b.target = 1 / g
		}
		b.label, b.note = t.chart, t.goal
		out = append(out, b)
	}
	return out
}
