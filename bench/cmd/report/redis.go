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
	scriptUs             float64 // server time in EVAL/EVALSHA per call
	perTrip              float64 // commands per round trip
	allocs, bytes        float64 // per decision
}

func (r *redisRow) ok() bool { return r.failed == "" && r.skipped == "" && len(r.samples) > 0 }

type redisResult struct {
	rows     []redisRow
	version  string
	opts     redisOptions
	benchBin string
}

// runRedis starts one redis-server, runs every implementation o.count
// times on it (interleaved, the order rotated each round) and stops it.
func runRedis(ims []redisbench.Impl, o redisOptions) (*redisResult, error) {
	bin, err := redisbench.FindBinary(redisbench.ServerEnv, "redis-server")
	if err != nil {
		return nil, err
	}
	benchBin, benchErr := redisbench.FindBinary(redisbench.BenchmarkEnv, "redis-benchmark")
	srv, err := redisbench.StartServer(bin)
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	ctx := context.Background()
	res := &redisResult{version: srv.Version(ctx), opts: o, benchBin: benchBin}
	fmt.Fprintf(os.Stderr, "%s: redis-server %s on %s\n", redisScenario, res.version, srv.Addr)
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
	return res, nil
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
		return float64(s.ScriptTime) / 1e3 / math.Max(float64(s.ScriptCalls), 1)
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

func printRedis(w io.Writer, res *redisResult, err error, took time.Duration, load string) {
	fmt.Fprintf(w, "\n### Redis: decisions per second, %d concurrent callers, one local redis-server\n\n", redisbench.Callers)
	if err != nil {
		fmt.Fprintf(w, "Not run: %v\n", err)
		return
	}
	o := res.opts
	fmt.Fprintf(w, "- one redis-server %s started by the report on 127.0.0.1 (`--save \"\" --appendonly no`), the same server for every run; FLUSHALL before each run\n", res.version)
	fmt.Fprintf(w, "- **redis-server, this Go process (GOMAXPROCS %d) and redis-benchmark share this machine's %d CPUs** (and with other jobs: 1-minute load average %s during this section): client CPU is taken from the server's, so the CPU columns show where the time goes\n", runtime.GOMAXPROCS(0), runtime.NumCPU(), load)
	fmt.Fprintf(w, "- %d callers (goroutines, closed loop: each takes its next decision when the previous one returns) over %d identities (`user:0` … `user:%d`); each Go implementation gets a fresh go-redis v9 client (PoolSize %d, ContextTimeoutEnabled) and %s of unmeasured warm-up, then %s measured\n",
		o.callers, redisbench.Identities, redisbench.Identities-1, o.callers+16, o.warmup, o.measure)
	fmt.Fprintf(w, "- limits, so that nothing is denied (a run with a denial or an error fails): sluice `core.PerSecond(%d)` with each algorithm, except sliding_window_log at its maximum `core.PerSecond(%d)` (its log then holds about decisions/s ÷ %d entries per key); ulule %d per second; redis_rate `PerSecond(%d)`\n",
		redisbench.Rate, core.MaxLogRate, redisbench.Identities, redisbench.Rate, redisbench.Rate)
	fmt.Fprintf(w, "- yardstick `evalsha`: go-redis `Script.Run` (EVALSHA) of a small GET + SET PX script returning 5 integers, one call per caller; ceilings: `redis-benchmark -h 127.0.0.1 -p PORT -c %d -n %d -r %d -q [-P 16] EVALSHA <sha> 1 user:__rand_int__` of that script\n",
		o.callers, o.ceilingN, redisbench.Identities)
	fmt.Fprintf(w, "- each cell is the median of %d run(s), implementations interleaved and rotated each round; took %s\n\n", o.count, took.Round(time.Second))

	fmt.Fprintln(w, "| implementation | one decision | decisions/s | spread | best | p50 | p99 | p99.9 | client CPU µs/decision | redis CPU µs/decision | redis busy | script µs/call | commands/round trip | allocs/decision | B/decision |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for i := range res.rows {
		r := &res.rows[i]
		cells := []string{"`" + r.impl.Name + "`", r.impl.Algorithm}
		switch {
		case r.skipped != "":
			cells = append(cells, "skipped: "+strings.ReplaceAll(r.skipped, "|", "/"))
			cells = append(cells, make([]string, 12)...)
		case !r.ok():
			cells = append(cells, "FAILED: "+strings.ReplaceAll(firstLine(r.failed), "|", "/"))
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

	find := func(name string) *redisRow {
		for i := range res.rows {
			if res.rows[i].impl.Name == name && res.rows[i].ok() {
				return &res.rows[i]
			}
		}
		return nil
	}
	var bestPeer *redisRow
	for i := range res.rows {
		r := &res.rows[i]
		if r.impl.Kind == redisbench.Peer && r.ok() && (bestPeer == nil || r.perSec > bestPeer.perSec) {
			bestPeer = r
		}
	}
	refs := []struct {
		label string
		row   *redisRow
	}{{"best peer", bestPeer}, {"`evalsha`", find("evalsha")}, {"`redis-benchmark`", find("redis-benchmark")}, {"`redis-benchmark -P 16`", find("redis-benchmark-P16")}}
	fmt.Fprintln(w)
	fmt.Fprint(w, "| sluice variant | decisions/s |")
	for _, ref := range refs {
		fmt.Fprintf(w, " ÷ %s |", ref.label)
	}
	fmt.Fprintln(w, " pipelined ÷ unpipelined | p99 of one decision | p99 < 1 ms |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---|")
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
			if np := find(r.impl.Name + "-nopipe"); np != nil && np.perSec > 0 {
				pipe = fmt.Sprintf("%.2f×", r.perSec/np.perSec)
			}
		}
		verdict := "no"
		if r.p99 < time.Millisecond {
			verdict = "yes"
		}
		cells = append(cells, pipe, latency(r.p99, true), verdict)
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "decisions/s: decisions completed ÷ wall time of the measured run (for redis-benchmark, its own requests per second); spread is (max−min)/median and best the")
	fmt.Fprintln(w, "highest run. Latency is one decision as its caller saw it (queueing in the client included), recorded for every call in a log-linear histogram (≤1.6% error);")
	fmt.Fprintln(w, "redis-benchmark -q prints only its p50. With a closed loop of N callers the mean latency is N ÷ throughput (Little's law), so a p99 under 1 ms at 64 callers")
	fmt.Fprintln(w, "needs well over 64,000 decisions/s. client CPU is this Go process's CPU time (user+system, whatever its goroutines do) per decision, or redis-benchmark's own, and")
	fmt.Fprintln(w, "in parentheses its share of one CPU; redis CPU is redis-server's main thread (INFO cpu) per decision and redis busy its share of wall time (100% = the server")
	fmt.Fprintln(w, "is the bottleneck); script µs/call is the time the server spent inside EVAL/EVALSHA (INFO commandstats), the rest of its CPU being network I/O and protocol.")
	fmt.Fprintln(w, "commands/round trip is what the go-redis client sent per write (1 without pipelining). allocs and B per decision are the Go process's (runtime.MemStats).")
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
