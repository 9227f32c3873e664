package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/sluicehq/sluice/bench/redisbench"
	"github.com/sluicehq/sluice/bench/servicebench"
)

// serviceOptions are the service section's flags.
type serviceOptions struct {
	count           int
	measure, warmup time.Duration
	openRate        float64
	openTime        time.Duration
	callers, conns  int
	dir, cache      string
	profile         bool
	profileDir      string
}

// serviceSection is the rate-limit service area: ratelimitd,
// envoyproxy/ratelimit and the grpc-go floor as processes on one
// redis-server.
type serviceSection struct {
	timing
	opts    serviceOptions
	rows    []serviceRow
	version string // redis-server's
	// grpc-go linked into ratelimitd and the floor ("" if not known), and
	// why not.
	grpcRatelimitd, grpcFloor, grpcErr string
	err                                error // the section could not run at all
}

// serviceRow holds the runs of one implementation and their medians.
type serviceRow struct {
	impl servicebench.Impl
	// samples are the closed-loop runs, rounds the round of each; open and
	// openRounds the same for the open-loop runs.
	samples    []servicebench.Sample
	rounds     []int
	open       []servicebench.Sample
	openRounds []int
	failed     string
	skipped    string

	perSec, best, spread       float64 // checks/s
	p50, p99, p999             time.Duration
	serverUs, redisUs, loadUs  float64 // CPU µs per check
	serverBusy, redisBusy, lgB float64 // CPU time ÷ wall time
	logBytes                   float64 // bytes the server logged per check
	ol                         openStats
	profile                    *servicebench.Breakdown
	profileErr                 string
}

// openStats aggregates a row's open-loop runs: the median of the runs' own
// latencies and their p99 range, as every other figure; and the p99 of all
// their calls together, which one stalled run dominates.
type openStats struct {
	runs              int
	offered, achieved float64 // calls/s, median
	p50, p99, p999    time.Duration
	p99Lo, p99Hi      time.Duration
	all99, max        time.Duration // of every call of every run
	sent99, lag99     time.Duration
	maxInFlight       int64
	// serverUs and redisUs are the server's and redis-server's CPU per
	// check (µs, median of the runs) at the offered rate.
	serverUs, redisUs float64
}

func (r *serviceRow) ok() bool { return r.failed == "" && r.skipped == "" && len(r.samples) > 0 }

// run is one measured run of the section: a row, closed or open loop.
type run struct {
	row  int
	open bool
}

// runs lists the runs of one round: every row closed loop, then every row
// with Impl.Open at the offered rate.
func runs(rows []serviceRow) []run {
	var out []run
	for i := range rows {
		out = append(out, run{row: i})
	}
	for i := range rows {
		if rows[i].impl.Open {
			out = append(out, run{row: i, open: true})
		}
	}
	return out
}

// rotation returns the order of the n runs of every round: round-robin
// over all of them, each round starting one further, so that every run
// takes every place in turn and machine drift hits all alike.
func rotation(n, rounds int) [][]int {
	out := make([][]int, rounds)
	for rep := range rounds {
		out[rep] = make([]int, n)
		for j := range n {
			out[rep][j] = (j + rep) % n
		}
	}
	return out
}

// profileTime is the least a profiled run lasts: a CPU profile samples
// whole seconds at 100 Hz, about a hundred samples in two seconds of a
// server using half a CPU.
const profileTime = 2 * time.Second

// runService starts a redis-server and the servers, and runs every selected
// implementation o.count times, interleaved.
func (r *report) runService() {
	o := r.opts
	so := serviceOptions{count: o.serviceCount, measure: o.serviceTime, warmup: o.serviceWarm, openRate: o.serviceOpenRate, openTime: o.serviceOpenTime,
		callers: o.callers, conns: o.serviceConns, dir: o.serviceDir, cache: o.serviceCache, profile: o.serviceProfile, profileDir: o.serviceProfileDir}
	sec := &serviceSection{opts: so}
	r.service = sec
	sec.timing = timed(func() { sec.run(r.sel.svcImpls) })
}

func (sec *serviceSection) run(ims []servicebench.Impl) {
	o := sec.opts
	ctx := context.Background()
	sec.rows = make([]serviceRow, len(ims))
	for i, im := range ims {
		sec.rows[i].impl = im
	}
	cache := o.cache
	if cache == "" {
		var err error
		if cache, err = servicebench.CacheDir(); err != nil {
			sec.err = err
			return
		}
	}
	srv, err := startRedis()
	if err != nil {
		sec.err = err
		fmt.Fprintf(os.Stderr, "%s: %v\n", serviceScenario, err)
		return
	}
	defer srv.Close()
	sec.version = srv.Version(ctx)
	servers := &servicebench.Servers{Redis: srv, GoCommand: servicebench.GoCommand(), CacheDir: cache, ServiceDir: o.dir, Log: os.Stderr, Profile: o.profile}
	defer servers.Close()
	sec.versions(ctx, servers)
	all := runs(sec.rows)
	for rep, order := range rotation(len(all), o.count) {
		for _, j := range order {
			sec.runOne(ctx, servers, all[j], rep)
		}
	}
	for i := range sec.rows {
		sec.rows[i].aggregate()
	}
}

// versions records the grpc-go versions of ratelimitd and the floor, if
// the selection runs both.
func (sec *serviceSection) versions(ctx context.Context, servers *servicebench.Servers) {
	var rl, fl bool
	for _, r := range sec.rows {
		rl = rl || r.impl.Server == servicebench.Ratelimitd
		fl = fl || r.impl.Server == servicebench.Floor
	}
	if !rl || !fl {
		return
	}
	a, b, err := servers.GRPCVersions(ctx)
	if err != nil {
		sec.grpcErr = err.Error()
		return
	}
	sec.grpcRatelimitd, sec.grpcFloor = a, b
	if a != b {
		fmt.Fprintf(os.Stderr, "%s: WARNING: ratelimitd links grpc-go %s, the floor %s: the floor is not ratelimitd's gRPC\n", serviceScenario, a, b)
	}
}

// runOne makes one run of round rep and records it in its row.
func (sec *serviceSection) runOne(ctx context.Context, servers *servicebench.Servers, ru run, rep int) {
	o := sec.opts
	row := &sec.rows[ru.row]
	if row.failed != "" || row.skipped != "" {
		return
	}
	label := row.impl.Name
	if ru.open {
		label += fmt.Sprintf(" (open loop, %.0f/s)", o.openRate)
	}
	t, closeConns, err := servers.Target(ctx, row.impl, o.conns, o.callers, servicebench.Users(servicebench.Identities))
	if errors.Is(err, servicebench.ErrNoRatelimitd) {
		row.skipped = err.Error()
		fmt.Fprintf(os.Stderr, "%s/%s: skipped: %v\n", serviceScenario, label, err)
		return
	}
	if err != nil {
		row.failed = err.Error()
		fmt.Fprintf(os.Stderr, "%s/%s: FAILED to start: %v\n", serviceScenario, label, err)
		return
	}
	runtime.GC()
	cfg := servicebench.RunConfig{Callers: o.callers, Users: servicebench.Users(servicebench.Identities), Warmup: o.warmup, Duration: o.measure}
	if ru.open {
		cfg.Rate, cfg.Duration, cfg.Warmup = o.openRate, o.openTime, min(o.warmup, 200*time.Millisecond)
	} else {
		// The last round profiles ratelimitd and the floor (at 100 Hz: about
		// 1% of their CPU), over at least profileTime.
		srv := row.impl.Server
		cfg.Profile = o.profile && rep == o.count-1 && (srv == servicebench.Ratelimitd || srv == servicebench.Floor)
		if cfg.Profile {
			cfg.Duration = max(cfg.Duration, profileTime)
		}
	}
	s, err := servicebench.Run(ctx, t, cfg)
	closeConns()
	if err != nil {
		row.failed = err.Error()
		fmt.Fprintf(os.Stderr, "%s/%s run %d/%d: FAILED: %v\n", serviceScenario, label, rep+1, o.count, err)
		return
	}
	if ru.open {
		row.open, row.openRounds = append(row.open, s), append(row.openRounds, rep)
		fmt.Fprintf(os.Stderr, "%s/%s run %d/%d: %.0f calls/s, p50 %s p99 %s (from send %s, sent late p99 %s, %d in flight at most)\n",
			serviceScenario, label, rep+1, o.count, float64(s.Calls)/s.Elapsed.Seconds(), latency(s.P50, true), latency(s.P99, true),
			latency(s.SentP99, true), latency(s.LagP99, true), s.MaxInFlight)
		return
	}
	row.samples, row.rounds = append(row.samples, s), append(row.rounds, rep)
	sec.keepProfile(row, s)
	fmt.Fprintf(os.Stderr, "%s/%s run %d/%d: %.0f checks/s, p50 %s p99 %s, CPU µs/check: server %.1f, redis %.1f, load generator %.1f\n",
		serviceScenario, label, rep+1, o.count, s.PerSec, latency(s.P50, true), latency(s.P99, true),
		s.PerCheck(s.ServerCPU), s.PerCheck(s.RedisCPU), s.PerCheck(s.LoadCPU))
}

// keepProfile keeps the profile of run s in its row (and in -serviceprofiledir).
func (sec *serviceSection) keepProfile(row *serviceRow, s servicebench.Sample) {
	switch {
	case s.Profile != nil:
		row.profile = s.Profile
		if sec.opts.profileDir == "" {
			return
		}
		p := filepath.Join(sec.opts.profileDir, row.impl.Name+".pprof")
		if err := os.WriteFile(p, s.ProfileData, 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "%s/%s: %v\n", serviceScenario, row.impl.Name, err)
		} else {
			fmt.Fprintf(os.Stderr, "%s/%s: wrote %s (go tool pprof -top %s)\n", serviceScenario, row.impl.Name, p, p)
		}
	case s.ProfileErr != nil:
		row.profileErr = s.ProfileErr.Error()
		fmt.Fprintf(os.Stderr, "%s/%s: no profile: %v\n", serviceScenario, row.impl.Name, s.ProfileErr)
	}
}

// Per-check figures of a run.
func serverUs(s servicebench.Sample) float64 { return s.PerCheck(s.ServerCPU) }
func redisUs(s servicebench.Sample) float64  { return s.PerCheck(s.RedisCPU) }
func loadUs(s servicebench.Sample) float64   { return s.PerCheck(s.LoadCPU) }
func perSec(s servicebench.Sample) float64   { return s.PerSec }

// perServerSecond is the checks decided per second of server CPU.
func perServerSecond(s servicebench.Sample) float64 {
	if s.ServerCPU <= 0 {
		return 0
	}
	return float64(s.Checks) / s.ServerCPU.Seconds()
}

func (r *serviceRow) aggregate() {
	ss := r.samples
	if len(ss) > 0 {
		med := func(f func(servicebench.Sample) float64) float64 { return median(ss, f) }
		r.perSec = med(perSec)
		lo, hi := spanOf(ss, perSec)
		r.best = hi
		if r.perSec > 0 {
			r.spread = (hi - lo) / r.perSec
		}
		r.p50 = time.Duration(med(func(s servicebench.Sample) float64 { return float64(s.P50) }))
		r.p99 = time.Duration(med(func(s servicebench.Sample) float64 { return float64(s.P99) }))
		r.p999 = time.Duration(med(func(s servicebench.Sample) float64 { return float64(s.P999) }))
		r.serverUs, r.redisUs, r.loadUs = med(serverUs), med(redisUs), med(loadUs)
		busy := func(d func(servicebench.Sample) time.Duration) float64 {
			return med(func(s servicebench.Sample) float64 { return float64(d(s)) / math.Max(float64(s.Elapsed), 1) })
		}
		r.serverBusy = busy(func(s servicebench.Sample) time.Duration { return s.ServerCPU })
		r.redisBusy = busy(func(s servicebench.Sample) time.Duration { return s.RedisCPU })
		r.lgB = busy(func(s servicebench.Sample) time.Duration { return s.LoadCPU })
		r.logBytes = med(func(s servicebench.Sample) float64 { return float64(s.ServerLog) / math.Max(float64(s.Checks), 1) })
	}
	r.ol = aggregateOpen(r.open)
}

// aggregateOpen aggregates the open-loop runs ss.
func aggregateOpen(ss []servicebench.Sample) openStats {
	if len(ss) == 0 {
		return openStats{}
	}
	var h redisbench.Histogram
	for _, s := range ss {
		if s.Latency != nil {
			h.Merge(s.Latency)
		}
	}
	med := func(f func(s servicebench.Sample) time.Duration) time.Duration {
		return time.Duration(median(ss, func(s servicebench.Sample) float64 { return float64(f(s)) }))
	}
	lo, hi := spanOf(ss, func(s servicebench.Sample) float64 { return float64(s.P99) })
	st := openStats{
		runs: len(ss), offered: median(ss, func(s servicebench.Sample) float64 { return s.Offered }),
		achieved: median(ss, func(s servicebench.Sample) float64 { return float64(s.Calls) / math.Max(s.Elapsed.Seconds(), 1e-9) }),
		p50:      med(func(s servicebench.Sample) time.Duration { return s.P50 }),
		p99:      med(func(s servicebench.Sample) time.Duration { return s.P99 }),
		p999:     med(func(s servicebench.Sample) time.Duration { return s.P999 }),
		p99Lo:    time.Duration(lo), p99Hi: time.Duration(hi),
		all99: h.Quantile(0.99), max: h.Max(),
		sent99:   med(func(s servicebench.Sample) time.Duration { return s.SentP99 }),
		lag99:    med(func(s servicebench.Sample) time.Duration { return s.LagP99 }),
		serverUs: median(ss, func(s servicebench.Sample) float64 { return s.PerCheck(s.ServerCPU) }),
		redisUs:  median(ss, func(s servicebench.Sample) float64 { return s.PerCheck(s.RedisCPU) }),
	}
	for _, s := range ss {
		st.maxInFlight = max(st.maxInFlight, s.MaxInFlight)
	}
	return st
}

// spanOf returns the smallest and largest f over ss.
func spanOf[T any](ss []T, f func(T) float64) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, s := range ss {
		lo, hi = min(lo, f(s)), max(hi, f(s))
	}
	return lo, hi
}

// span is a median and the range it comes from.
type span struct {
	med, lo, hi float64
	n           int
}

func spanFrom(v []float64) span {
	if len(v) == 0 {
		return span{}
	}
	lo, hi := spanOf(v, func(x float64) float64 { return x })
	return span{med: median(v, func(x float64) float64 { return x }), lo: lo, hi: hi, n: len(v)}
}

// figure is the median and range of f over the row's closed-loop runs.
func (r *serviceRow) figure(f func(servicebench.Sample) float64) span {
	v := make([]float64, len(r.samples))
	for i, s := range r.samples {
		v[i] = f(s)
	}
	return spanFrom(v)
}

// roundRatio is f(a) ÷ f(b) computed in every round both ran, and the median
// and range of those per-round ratios: both sides of a ratio come from
// runs made back to back, so drift of the machine between rounds cancels.
func roundRatio(a, b *serviceRow, f func(servicebench.Sample) float64) span {
	var v []float64
	for i, ra := range a.rounds {
		for j, rb := range b.rounds {
			if ra != rb {
				continue
			}
			if den := f(b.samples[j]); den > 0 {
				v = append(v, f(a.samples[i])/den)
			}
		}
	}
	return spanFrom(v)
}
