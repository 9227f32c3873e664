package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/membench"
	"github.com/sluicehq/sluice/bench/redisbench"
	"github.com/sluicehq/sluice/core"
)

type redisOptions struct {
	count             int
	measure, warmup   time.Duration
	callers, ceilingN int
}

// redisRow holds the runs of one implementation and their medians.
type redisRow struct {
	impl    redisbench.Impl
	samples []redisbench.Sample
	failed  string
	skipped string

	perSec, best, spread float64
	p50, p99, p999       time.Duration
	clientUs, serverUs   float64 // CPU µs per decision
	clientBusy, busy     float64 // CPU time ÷ wall time
	scriptUs             float64 // server time in EVAL/EVALSHA/FCALL per decision
	perTrip              float64 // commands per round trip
	allocs, bytes        float64 // per decision
}

func (r *redisRow) ok() bool { return r.failed == "" && r.skipped == "" && len(r.samples) > 0 }

// redisSection is the Redis throughput area.
type redisSection struct {
	timing
	rows     []redisRow
	version  string
	opts     redisOptions
	benchBin string
	err      error
}

// redisMemSection is the Redis memory area.
type redisMemSection struct {
	timing
	rows       []redisMemRow
	version    string
	identities int
	err        error
}

// redisMemRow is one implementation's memory run.
type redisMemRow struct {
	impl   redisbench.Impl
	s      redisbench.MemorySample
	failed string
}

func (r *redisMemRow) ok() bool { return r.failed == "" && r.s.Identities > 0 }

// runRedis starts one redis-server and runs the selected Redis scenarios on
// it: the throughput scenario, then the memory scenario.
func (r *report) runRedis() {
	o := r.opts
	ro := redisOptions{count: o.redisCount, measure: o.redisTime, warmup: o.redisWarm, callers: o.callers, ceilingN: o.ceilingN}
	if len(r.sel.rdImpls) > 0 {
		r.redis = &redisSection{opts: ro}
	}
	if len(r.sel.rdMemImpls) > 0 {
		r.redisMem = &redisMemSection{identities: o.redisKeys}
	}
	srv, err := startRedis()
	if err != nil {
		if r.redis != nil {
			r.redis.err = err
		}
		if r.redisMem != nil {
			r.redisMem.err = err
		}
		fmt.Fprintf(os.Stderr, "Redis: %v\n", err)
		return
	}
	defer srv.Close()
	version := srv.Version(context.Background())
	fmt.Fprintf(os.Stderr, "Redis: redis-server %s on %s\n", version, srv.Addr)
	if r.redis != nil {
		r.redis.version = version
		r.redis.timing = timed(func() { r.redis.run(srv, r.sel.rdImpls) })
	}
	if r.redisMem != nil {
		r.redisMem.version = version
		r.redisMem.timing = timed(func() { r.redisMem.run(srv, r.sel.rdMemImpls, o.callers) })
	}
}

func startRedis() (*redisbench.Server, error) {
	bin, err := redisbench.FindBinary(redisbench.ServerEnv, "redis-server")
	if err != nil {
		return nil, err
	}
	return redisbench.StartServer(bin)
}

// run runs every implementation o.count times on srv, interleaved, the
// order rotated each round.
func (res *redisSection) run(srv *redisbench.Server, ims []redisbench.Impl) {
	o := res.opts
	benchBin, benchErr := redisbench.FindBinary(redisbench.BenchmarkEnv, "redis-benchmark")
	res.benchBin = benchBin
	ctx := context.Background()
	keys := membench.Keys(redisbench.Identities)
	rows := make([]redisRow, len(ims))
	for i, im := range ims {
		rows[i].impl = im
		if im.Kind == redisbench.Ceiling && benchErr != nil {
			rows[i].skipped = benchErr.Error()
		}
	}
	for rep := range o.count {
		for j := range ims {
			i := (j + rep) % len(ims)
			r := &rows[i]
			if r.failed != "" || r.skipped != "" {
				continue
			}
			runtime.GC()
			var s redisbench.Sample
			var err error
			if r.impl.Kind == redisbench.Ceiling {
				s, err = redisbench.RunCeiling(ctx, srv.Admin(), srv.Port, benchBin, r.impl, o.callers, redisbench.Identities, o.ceilingN, time.Minute)
			} else {
				s, err = redisbench.Run(ctx, srv.Admin(), srv.Addr, r.impl, redisbench.RunConfig{
					Callers: o.callers, Keys: keys, Warmup: o.warmup, Duration: o.measure,
				})
			}
			if err != nil {
				r.failed = err.Error()
				fmt.Fprintf(os.Stderr, "%s/%s run %d/%d: FAILED: %v\n", redisScenario, r.impl.Name, rep+1, o.count, err)
				continue
			}
			r.samples = append(r.samples, s)
			fmt.Fprintf(os.Stderr, "%s/%s run %d/%d: %.0f decisions/s, p99 %s, client %.1f + redis %.1f CPU µs/decision, %.1f commands/round trip\n",
				redisScenario, r.impl.Name, rep+1, o.count, s.PerSec, latency(s.P99, s.HasLatency), perDecision(s.ClientCPU, s), perDecision(s.ServerCPU, s), ratio(s.Commands, s.RoundTrips))
		}
	}
	for i := range rows {
		aggregate(&rows[i])
	}
	res.rows = rows
}

// run measures each implementation once: its memory is nearly
// deterministic.
func (m *redisMemSection) run(srv *redisbench.Server, ims []redisbench.Impl, callers int) {
	keys := membench.Keys(m.identities)
	for _, im := range ims {
		runtime.GC()
		s, err := redisbench.RunMemory(context.Background(), srv.Admin(), srv.Addr, im, callers, keys)
		row := redisMemRow{impl: im, s: s}
		if err != nil {
			row.failed = err.Error()
			fmt.Fprintf(os.Stderr, "%s/%s: FAILED: %v\n", redisMemoryScenario, im.Name, err)
		} else {
			fmt.Fprintf(os.Stderr, "%s/%s: %.1f bytes/identity, %.2f keys/identity\n", redisMemoryScenario, im.Name, s.BytesPerIdentity(), s.KeysPerIdentity())
		}
		m.rows = append(m.rows, row)
	}
}

func perDecision(d time.Duration, s redisbench.Sample) float64 {
	if s.Decisions == 0 {
		return 0
	}
	return float64(d) / 1e3 / float64(s.Decisions)
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func aggregate(r *redisRow) {
	ss := r.samples
	if len(ss) == 0 {
		return
	}
	med := func(f func(redisbench.Sample) float64) float64 {
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
	r.perSec = med(func(s redisbench.Sample) float64 { return s.PerSec })
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range ss {
		lo, hi = min(lo, s.PerSec), max(hi, s.PerSec)
	}
	r.best = hi
	if r.perSec > 0 {
		r.spread = (hi - lo) / r.perSec
	}
	r.p50 = time.Duration(med(func(s redisbench.Sample) float64 { return float64(s.P50) }))
	r.p99 = time.Duration(med(func(s redisbench.Sample) float64 { return float64(s.P99) }))
	r.p999 = time.Duration(med(func(s redisbench.Sample) float64 { return float64(s.P999) }))
	r.clientUs = med(func(s redisbench.Sample) float64 { return perDecision(s.ClientCPU, s) })
	r.serverUs = med(func(s redisbench.Sample) float64 { return perDecision(s.ServerCPU, s) })
	r.clientBusy = med(func(s redisbench.Sample) float64 { return float64(s.ClientCPU) / float64(s.Elapsed) })
	r.busy = med(func(s redisbench.Sample) float64 { return float64(s.ServerCPU) / float64(s.Elapsed) })
	r.scriptUs = med(func(s redisbench.Sample) float64 {
		return float64(s.ScriptTime) / 1e3 / math.Max(float64(s.Decisions), 1)
	})
	r.perTrip = med(func(s redisbench.Sample) float64 { return ratio(s.Commands, s.RoundTrips) })
	r.allocs = med(func(s redisbench.Sample) float64 { return float64(s.Allocs) / float64(s.Decisions) })
	r.bytes = med(func(s redisbench.Sample) float64 { return float64(s.Bytes) / float64(s.Decisions) })
}

func latency(d time.Duration, has bool) string {
	switch {
	case !has || d <= 0:
		return "—"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0f µs", float64(d)/1e3)
	default:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	}
}

// find returns the row named name, or nil.
func (res *redisSection) find(name string) *redisRow {
	for i := range res.rows {
		if res.rows[i].impl.Name == name && res.rows[i].ok() {
			return &res.rows[i]
		}
	}
	return nil
}

// bestPeer returns the peer with the highest throughput, or nil.
func (res *redisSection) bestPeer() *redisRow {
	var best *redisRow
	for i := range res.rows {
		r := &res.rows[i]
		if r.impl.Kind == redisbench.Peer && r.ok() && (best == nil || r.perSec > best.perSec) {
			best = r
		}
	}
	return best
}

// defaultSluice is the name of sluice's default configuration: a token
// bucket, pipelined.
const defaultSluice = "sluice-token_bucket"

func (res *redisSection) write(w io.Writer) {
	fmt.Fprintf(w, "\n## Redis: decisions per second, %d concurrent callers, one local redis-server\n\n", res.opts.callers)
	if res.err != nil {
		fmt.Fprintf(w, "Not run: %v\n", res.err)
		return
	}
	res.writeSetup(w)
	res.writeTable(w)
	res.writeRatios(w)
	writeRedisNotes(w)
}

// writeSetup describes how the Redis throughput scenario ran.
func (res *redisSection) writeSetup(w io.Writer) {
	o := res.opts
	fmt.Fprintf(w, "- one redis-server %s started by the report on 127.0.0.1 (`--save \"\" --appendonly no`), the same server for every run; FLUSHALL before each run\n", res.version)
	fmt.Fprintf(w, "- **redis-server, this Go process (GOMAXPROCS %d) and redis-benchmark share this machine's %d CPUs** (and with other jobs: 1-minute load average %s during this section): client CPU is taken from the server's, so the CPU columns show where the time goes\n", runtime.GOMAXPROCS(0), runtime.NumCPU(), res.load)
	fmt.Fprintf(w, "- %d callers (goroutines, closed loop: each takes its next decision when the previous one returns) over %d identities (`user:0` … `user:%d`); each Go implementation gets a fresh go-redis v9 client (PoolSize %d, ContextTimeoutEnabled) and %s of unmeasured warm-up, then %s measured\n",
		o.callers, redisbench.Identities, redisbench.Identities-1, o.callers+16, o.warmup, o.measure)
	fmt.Fprintf(w, "- limits, so that nothing is denied (a run with a denial or an error fails): sluice `core.PerSecond(%d)` with each algorithm, except sliding_window_log at its maximum `core.PerSecond(%d)` (its log then holds about decisions/s ÷ %d entries per key); ulule %d per second; redis_rate and throttled GCRA at %d per second, burst %d\n",
		redisbench.Rate, core.MaxLogRate, redisbench.Identities, redisbench.Rate, redisbench.Rate, redisbench.Rate)
	fmt.Fprintf(w, "- sluice's store is `redisstore.New(client, WithTimeout(1s))` (automatic pipelining on, the default; `-nopipe` rows: `WithPipelining(0, 0)`); the timeout is raised from 50 ms so that a stall of a loaded machine does not fail a run\n")
	fmt.Fprintf(w, "- yardstick `evalsha`: go-redis `Script.Run` (EVALSHA) of a small GET + SET PX script returning 5 integers, one call per caller; the server's ceiling: `redis-benchmark -c %d -n %d -r %d -q [-P 16] EVALSHA <sha> 1 user:__rand_int__` of that script (a C client, one thread)\n",
		o.callers, o.ceilingN, redisbench.Identities)
	fmt.Fprintf(w, "- each cell is the median of %d run(s), implementations interleaved and rotated each round; took %s\n\n", o.count, res.took.Round(time.Second))
}

// writeTable writes a row of every implementation's figures.
func (res *redisSection) writeTable(w io.Writer) {
	fmt.Fprintln(w, "| implementation | one decision | decisions/s | spread | best | p50 | p99 | p99.9 | client CPU µs/decision | redis CPU µs/decision | redis busy | script µs/decision | commands/round trip | allocs/decision | B/decision |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for i := range res.rows {
		r := &res.rows[i]
		name := "`" + r.impl.Name + "`"
		if r.impl.Kind == redisbench.Sluice {
			name = "**" + name + "**"
		}
		cells := []string{name, r.impl.Algorithm}
		switch {
		case r.skipped != "":
			cells = append(cells, "skipped: "+cell(r.skipped))
			cells = append(cells, make([]string, 12)...)
		case !r.ok():
			cells = append(cells, "FAILED: "+cell(r.failed))
			cells = append(cells, make([]string, 12)...)
		default:
			ceiling := r.impl.Kind == redisbench.Ceiling
			allocs, bytes := perOp(r.allocs, "%.1f"), perOp(r.bytes, "%.0f")
			if ceiling {
				allocs, bytes = "—", "—"
			}
			cells = append(cells, fmt.Sprintf("%.0f", r.perSec), fmt.Sprintf("%.0f%%", 100*r.spread), fmt.Sprintf("%.0f", r.best),
				latency(r.p50, true), latency(r.p99, !ceiling), latency(r.p999, !ceiling),
				fmt.Sprintf("%.1f (%.0f%% of a CPU)", r.clientUs, 100*r.clientBusy),
				fmt.Sprintf("%.1f", r.serverUs), fmt.Sprintf("%.0f%%", 100*r.busy), fmt.Sprintf("%.1f", r.scriptUs),
				fmt.Sprintf("%.1f", r.perTrip), allocs, bytes)
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
}

// writeRatios writes, for each of sluice's variants, its throughput over
// the best peer's and the ceilings', and over its unpipelined twin's.
func (res *redisSection) writeRatios(w io.Writer) {
	bestPeer := res.bestPeer()
	refs := []struct {
		label string
		row   *redisRow
	}{{"best peer", bestPeer}, {"`evalsha`", res.find("evalsha")}, {"`redis-benchmark` (the ceiling)", res.find("redis-benchmark")}, {"`redis-benchmark -P 16`", res.find("redis-benchmark-P16")}}
	fmt.Fprintf(w, "\n### Ratios of sluice's variants\n\n")
	fmt.Fprint(w, "| sluice variant | decisions/s |")
	for _, ref := range refs {
		fmt.Fprintf(w, " ÷ %s |", ref.label)
	}
	fmt.Fprintln(w, " pipelined ÷ unpipelined | p99 of one decision |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|")
	for i := range res.rows {
		r := &res.rows[i]
		if r.impl.Kind != redisbench.Sluice || !r.ok() {
			continue
		}
		cells := []string{"`" + r.impl.Name + "`", fmt.Sprintf("%.0f", r.perSec)}
		for _, ref := range refs {
			switch {
			case ref.row == nil || ref.row.perSec <= 0:
				cells = append(cells, "—")
			case ref.label == "best peer":
				cells = append(cells, fmt.Sprintf("%.2f× (vs %s)", r.perSec/ref.row.perSec, ref.row.impl.Name))
			default:
				cells = append(cells, fmt.Sprintf("%.2f×", r.perSec/ref.row.perSec))
			}
		}
		pipe := "—"
		if !strings.HasSuffix(r.impl.Name, "-nopipe") {
			if np := res.find(r.impl.Name + "-nopipe"); np != nil && np.perSec > 0 {
				pipe = fmt.Sprintf("%.2f×", r.perSec/np.perSec)
			}
		}
		cells = append(cells, pipe, latency(r.p99, true))
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
}

// writeRedisNotes says what the columns of the Redis tables measure.
func writeRedisNotes(w io.Writer) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "decisions/s: decisions completed ÷ wall time of the measured run (for redis-benchmark, its own requests per second); spread is (max−min)/median and best the")
	fmt.Fprintln(w, "highest run. Latency is one decision as its caller saw it (queueing in the client included), recorded for every call in a log-linear histogram (≤1.6% error);")
	fmt.Fprintln(w, "redis-benchmark -q prints only its p50. With a closed loop of N callers the mean latency is N ÷ throughput (Little's law). client CPU is this Go process's")
	fmt.Fprintln(w, "CPU time (user+system, whatever its goroutines do) per decision, or redis-benchmark's own, and in parentheses its share of one CPU; redis CPU is")
	fmt.Fprintln(w, "redis-server's main thread (INFO cpu) per decision and redis busy its share of wall time (100% = the server is the bottleneck); script µs/decision is the time the")
	fmt.Fprintln(w, "server spent inside EVAL/EVALSHA/FCALL (INFO commandstats) per decision (one call may decide several: sluice sends the one-op decisions of a pipeline as one FCALL), the rest of its CPU being network I/O and protocol. commands/round trip is what the go-redis client sent")
	fmt.Fprintln(w, "per write (1 without pipelining; throttled sends a TIME+GET pipeline, then its EVAL). allocs and B per decision are the Go process's (runtime.MemStats).")
	fmt.Fprintln(w, "The ceiling is what redis-server itself sustains for a script of this size with the same 64 connections and one request in flight on each; `-P 16`")
	fmt.Fprintln(w, "lets each connection pipeline 16, the most a client can get from batching. A Go client on the same 2 CPUs competes with the server for them, which redis-benchmark,")
	fmt.Fprintln(w, "a single C thread, does much less.")
}

func (m *redisMemSection) write(w io.Writer) {
	fmt.Fprintf(w, "\n## Redis: memory per identity\n\n")
	if m.err != nil {
		fmt.Fprintf(w, "Not run: %v\n", m.err)
		return
	}
	fmt.Fprintf(w, "Each implementation, configured to %d per %s (a realistic API quota: the state of one decision lives for a minute or more, past the end of the run), takes one decision for each of %s identities (`user:0` …), from %d callers, on the same redis-server %s after FLUSHALL. bytes/identity is the growth of the server's `used_memory` (INFO memory: keys, values, expiry entries and the dictionaries' share) ÷ identities; keys/identity is DBSIZE ÷ identities. One run each (the figure is nearly deterministic); took %s.\n\n",
		redisbench.MemoryQuota.N, redisbench.MemoryQuota.Period, humanCount(m.identities), redisbench.Callers, m.version, m.took.Round(time.Second))
	_, best := m.compare()
	fmt.Fprintln(w, "| implementation | bytes/identity | keys/identity | insertion time | sluice ÷ smallest peer |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---|")
	for i := range m.rows {
		r := &m.rows[i]
		name := "`" + r.impl.Name + "`"
		if r.impl.Kind == redisbench.Sluice {
			name = "**" + name + "**"
		}
		if !r.ok() {
			fmt.Fprintf(w, "| %s | FAILED: %s | | | |\n", name, cell(r.failed))
			continue
		}
		ratio := ""
		if best != nil && r.impl.Kind == redisbench.Sluice {
			ratio = fmt.Sprintf("%.2f× (vs %s)", r.s.BytesPerIdentity()/best.s.BytesPerIdentity(), best.impl.Name)
		}
		fmt.Fprintf(w, "| %s | %.1f | %.2f | %s | %s |\n", name, r.s.BytesPerIdentity(), r.s.KeysPerIdentity(), r.s.Elapsed.Round(time.Millisecond), ratio)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Key names differ: each library uses its own prefix and layout, and pays for it. `evalsha` is the yardstick's one string key with an expiry (`user:N`).")
}

// compare returns sluice's default row and the peer using the least memory.
func (m *redisMemSection) compare() (self, best *redisMemRow) {
	for i := range m.rows {
		r := &m.rows[i]
		switch {
		case !r.ok():
		case r.impl.Name == defaultSluice:
			self = r
		case r.impl.Kind == redisbench.Peer && (best == nil || r.s.BytesPerIdentity() < best.s.BytesPerIdentity()):
			best = r
		}
	}
	if best != nil && best.s.BytesPerIdentity() <= 0 {
		best = nil
	}
	return self, best
}
