package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/servicebench"
)

// serviceOptions are the service section's flags.
type serviceOptions struct {
	count           int
	measure, warmup time.Duration
	callers, conns  int
	dir, cache      string
	profile         bool
	profileDir      string
}

// serviceSection is the rate-limit service area: ratelimitd and
// envoyproxy/ratelimit as processes on one redis-server.
type serviceSection struct {
	timing
	opts    serviceOptions
	rows    []serviceRow
	version string // redis-server's
	err     error  // the section could not run at all
}

// serviceRow holds the runs of one implementation and their medians.
type serviceRow struct {
	impl    servicebench.Impl
	samples []servicebench.Sample
	failed  string
	skipped string

	perSec, best, spread       float64 // checks/s
	p50, p99, p999             time.Duration
	serverUs, redisUs, loadUs  float64 // CPU µs per check
	serverBusy, redisBusy, lgB float64 // CPU time ÷ wall time
	profile                    *servicebench.Breakdown
	profileErr                 string
}

func (r *serviceRow) ok() bool { return r.failed == "" && r.skipped == "" && len(r.samples) > 0 }

// runService starts a redis-server and the servers, and runs every selected
// implementation o.count times, interleaved, the order rotated each round.
func (r *report) runService() {
	o := r.opts
	so := serviceOptions{count: o.serviceCount, measure: o.serviceTime, warmup: o.serviceWarm, callers: o.callers, conns: o.serviceConns, dir: o.serviceDir, cache: o.serviceCache, profile: o.serviceProfile, profileDir: o.serviceProfileDir}
	sec := &serviceSection{opts: so}
	r.service = sec
	sec.timing = timed(func() { sec.run(r.sel.svcImpls) })
}

func (sec *serviceSection) run(ims []servicebench.Impl) {
	o := sec.opts
	ctx := context.Background()
	rows := make([]serviceRow, len(ims))
	for i, im := range ims {
		rows[i].impl = im
	}
	sec.rows = rows
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
	users := servicebench.Users(servicebench.Identities)
	for rep := range o.count {
		for j := range ims {
			i := (j + rep) % len(ims)
			row := &rows[i]
			if row.failed != "" || row.skipped != "" {
				continue
			}
			t, closeConns, err := servers.Target(ctx, row.impl, o.conns, o.callers, users)
			if errors.Is(err, servicebench.ErrNoRatelimitd) {
				row.skipped = err.Error()
				fmt.Fprintf(os.Stderr, "%s/%s: skipped: %v\n", serviceScenario, row.impl.Name, err)
				continue
			}
			if err != nil {
				row.failed = err.Error()
				fmt.Fprintf(os.Stderr, "%s/%s: FAILED to start: %v\n", serviceScenario, row.impl.Name, err)
				continue
			}
			runtime.GC()
			// The last round profiles ratelimitd (at 100 Hz: about 1% of its CPU).
			profile := o.profile && rep == o.count-1 && row.impl.Server == servicebench.Ratelimitd
			s, err := servicebench.Run(ctx, t, servicebench.RunConfig{Callers: o.callers, Users: users, Warmup: o.warmup, Duration: o.measure, Profile: profile})
			closeConns()
			if err != nil {
				row.failed = err.Error()
				fmt.Fprintf(os.Stderr, "%s/%s run %d/%d: FAILED: %v\n", serviceScenario, row.impl.Name, rep+1, o.count, err)
				continue
			}
			row.samples = append(row.samples, s)
			if s.Profile != nil {
				row.profile = s.Profile
				if o.profileDir != "" {
					p := filepath.Join(o.profileDir, row.impl.Name+".pprof")
					if err := os.WriteFile(p, s.ProfileData, 0o644); err != nil {
						fmt.Fprintf(os.Stderr, "%s/%s: %v\n", serviceScenario, row.impl.Name, err)
					} else {
						fmt.Fprintf(os.Stderr, "%s/%s: wrote %s (go tool pprof -top %s)\n", serviceScenario, row.impl.Name, p, p)
					}
				}
			} else if s.ProfileErr != nil {
				row.profileErr = s.ProfileErr.Error()
				fmt.Fprintf(os.Stderr, "%s/%s: no profile: %v\n", serviceScenario, row.impl.Name, s.ProfileErr)
			}
			fmt.Fprintf(os.Stderr, "%s/%s run %d/%d: %.0f checks/s, p50 %s p99 %s, CPU µs/check: server %.1f, redis %.1f, load generator %.1f\n",
				serviceScenario, row.impl.Name, rep+1, o.count, s.PerSec, latency(s.P50, true), latency(s.P99, true),
				s.PerCheck(s.ServerCPU), s.PerCheck(s.RedisCPU), s.PerCheck(s.LoadCPU))
		}
	}
	for i := range rows {
		rows[i].aggregate()
	}
}

func (r *serviceRow) aggregate() {
	ss := r.samples
	if len(ss) == 0 {
		return
	}
	med := func(f func(servicebench.Sample) float64) float64 { return median(ss, f) }
	r.perSec = med(func(s servicebench.Sample) float64 { return s.PerSec })
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range ss {
		lo, hi = min(lo, s.PerSec), max(hi, s.PerSec)
	}
	r.best = hi
	if r.perSec > 0 {
		r.spread = (hi - lo) / r.perSec
	}
	r.p50 = time.Duration(med(func(s servicebench.Sample) float64 { return float64(s.P50) }))
	r.p99 = time.Duration(med(func(s servicebench.Sample) float64 { return float64(s.P99) }))
	r.p999 = time.Duration(med(func(s servicebench.Sample) float64 { return float64(s.P999) }))
	r.serverUs = med(func(s servicebench.Sample) float64 { return s.PerCheck(s.ServerCPU) })
	r.redisUs = med(func(s servicebench.Sample) float64 { return s.PerCheck(s.RedisCPU) })
	r.loadUs = med(func(s servicebench.Sample) float64 { return s.PerCheck(s.LoadCPU) })
	busy := func(d func(servicebench.Sample) time.Duration) float64 {
		return med(func(s servicebench.Sample) float64 { return float64(d(s)) / math.Max(float64(s.Elapsed), 1) })
	}
	r.serverBusy = busy(func(s servicebench.Sample) time.Duration { return s.ServerCPU })
	r.redisBusy = busy(func(s servicebench.Sample) time.Duration { return s.RedisCPU })
	r.lgB = busy(func(s servicebench.Sample) time.Duration { return s.LoadCPU })
}

// find returns the row named name if it has results, or nil.
func (sec *serviceSection) find(name string) *serviceRow {
	for i := range sec.rows {
		if sec.rows[i].impl.Name == name && sec.rows[i].ok() {
			return &sec.rows[i]
		}
	}
	return nil
}

// Names of the rows the service targets compare.
const (
	envoyRatelimitImpl = "envoy-ratelimit"
	ratelimitdRedis    = "ratelimitd-redis"
	remoteImpl         = "remotestore"
	redisStoreImpl     = "redisstore"
)

// Goals of the service targets (issue 14).
const (
	serviceGoal  = 5                    // ratelimitd on Redis ÷ envoyproxy/ratelimit, checks/s
	serviceP99Ms = 5 * time.Millisecond // ratelimitd on Redis, p99 of one check
)

// serviceTargets evaluates the service targets.
func (sec *serviceSection) targets() []target {
	self, en := sec.find(ratelimitdRedis), sec.find(envoyRatelimitImpl)
	tput := target{name: fmt.Sprintf("service, %d callers, ShouldRateLimit: ratelimitd on Redis at least %d× envoyproxy/ratelimit's checks/s (same redis-server, same rules)", sec.opts.callers, serviceGoal), goal: fmt.Sprintf("≥ %d×", serviceGoal)}
	p99 := target{name: fmt.Sprintf("service, %d callers: ratelimitd on Redis, p99 of one ShouldRateLimit under %s", sec.opts.callers, serviceP99Ms), goal: "< 1×"}
	switch {
	case sec.err != nil:
		tput.missing, p99.missing = sec.err.Error(), sec.err.Error()
	case self == nil:
		why := ratelimitdRedis + " failed or was not run"
		if row := sec.row(ratelimitdRedis); row != nil && row.skipped != "" {
			why = row.skipped
		}
		tput.missing, p99.missing = why, why
	default:
		p99.ratio = float64(self.p99) / float64(serviceP99Ms)
		p99.met = p99.ratio < 1
		p99.measured = fmt.Sprintf("p99 %s, p50 %s, p99.9 %s at %.0f checks/s", latency(self.p99, true), latency(self.p50, true), latency(self.p999, true), self.perSec)
		p99.why = fmt.Sprintf("with %d callers in a closed loop the mean latency is %d ÷ throughput (Little's law): %s", sec.opts.callers, sec.opts.callers, latency(time.Duration(float64(sec.opts.callers)/self.perSec*1e9), true))
		if en == nil {
			tput.missing = envoyRatelimitImpl + " failed or was not run"
			break
		}
		tput.ratio = self.perSec / en.perSec
		tput.met = tput.ratio >= serviceGoal
		tput.close = (tput.met && self.perSec < serviceGoal*en.best) || (!tput.met && self.best >= serviceGoal*en.perSec)
		tput.measured = fmt.Sprintf("ratelimitd %.0f checks/s (p99 %s) vs envoyproxy/ratelimit %.0f checks/s (p99 %s)", self.perSec, latency(self.p99, true), en.perSec, latency(en.p99, true))
		tput.why = fmt.Sprintf("CPU per check: server %.1f µs vs %.1f µs, redis-server %.1f µs vs %.1f µs, load generator %.1f µs vs %.1f µs; all share %d CPUs",
			self.serverUs, en.serverUs, self.redisUs, en.redisUs, self.loadUs, en.loadUs, runtime.NumCPU())
		if goal := serviceGoal * en.perSec; !tput.met && goal > 0 {
			tput.why += fmt.Sprintf(": at %d× (%.0f checks/s) the load generator alone would need %.2f CPUs and ratelimitd, redis-server and it together %.2f",
				serviceGoal, goal, goal*self.loadUs/1e6, goal*self.totalUs()/1e6)
		}
	}
	return []target{tput, p99}
}

func (sec *serviceSection) row(name string) *serviceRow {
	for i := range sec.rows {
		if sec.rows[i].impl.Name == name {
			return &sec.rows[i]
		}
	}
	return nil
}

// chartRows are the service ratios, above 1 better for ratelimitd.
func (sec *serviceSection) chartRows() []bar {
	if sec.err != nil {
		return nil
	}
	self, en := sec.find(ratelimitdRedis), sec.find(envoyRatelimitImpl)
	if self == nil {
		return nil
	}
	var out []bar
	if en != nil && en.perSec > 0 {
		out = append(out, bar{group: "service", label: "ratelimitd on Redis, checks/s", value: self.perSec / en.perSec, target: serviceGoal, note: "vs envoyproxy/ratelimit"})
	}
	if self.p99 > 0 {
		out = append(out, bar{group: "service", label: "ratelimitd on Redis, p99", value: float64(serviceP99Ms) / float64(self.p99), target: 1, note: "vs 5 ms"})
	}
	return out
}

// writeTable writes the rows of group g, and the ratios that matter to it.
func (sec *serviceSection) writeTable(w io.Writer, g servicebench.Group) {
	fmt.Fprintln(w, "| implementation | server | store | one call | checks/s | spread | best | p50 | p99 | p99.9 | server CPU µs/check | redis CPU µs/check | load generator CPU µs/check |")
	fmt.Fprintln(w, "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for i := range sec.rows {
		r := &sec.rows[i]
		if r.impl.Group != g {
			continue
		}
		name := "`" + r.impl.Name + "`"
		if r.impl.Server == servicebench.Ratelimitd {
			name = "**" + name + "**"
		}
		cells := []string{name, r.impl.Server.String(), r.impl.Store(), r.impl.API}
		switch {
		case r.skipped != "":
			cells = append(cells, "skipped: "+cell(r.skipped))
			cells = append(cells, make([]string, 8)...)
		case !r.ok():
			cells = append(cells, "FAILED: "+cell(r.failed))
			cells = append(cells, make([]string, 8)...)
		default:
			server, redis := "—", "—"
			if r.impl.Server != servicebench.InProcess {
				server = fmt.Sprintf("%.1f (%.0f%% of a CPU)", r.serverUs, 100*r.serverBusy)
			}
			if r.impl.Redis {
				redis = fmt.Sprintf("%.1f (%.0f%% of a CPU)", r.redisUs, 100*r.redisBusy)
			}
			cells = append(cells, fmt.Sprintf("%.0f", r.perSec), fmt.Sprintf("%.0f%%", 100*r.spread), fmt.Sprintf("%.0f", r.best),
				latency(r.p50, true), latency(r.p99, true), latency(r.p999, true), server, redis,
				fmt.Sprintf("%.1f (%.0f%% of a CPU)", r.loadUs, 100*r.lgB))
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	switch g {
	case servicebench.Envoy:
		en := sec.find(envoyRatelimitImpl)
		if en == nil || !slices.ContainsFunc(sec.rows, func(r serviceRow) bool {
			return r.impl.Server == servicebench.Ratelimitd && r.impl.Group == g && r.ok()
		}) {
			return
		}
		fmt.Fprintf(w, "\n| ratelimitd variant | checks/s ÷ envoyproxy/ratelimit's | server CPU per check ÷ envoyproxy/ratelimit's | p99 |\n|---|---:|---:|---:|\n")
		for i := range sec.rows {
			r := &sec.rows[i]
			if r.impl.Server != servicebench.Ratelimitd || r.impl.Group != g || !r.ok() {
				continue
			}
			cpu := "—"
			if en.serverUs > 0 {
				cpu = fmt.Sprintf("%.2f×", r.serverUs/en.serverUs)
			}
			fmt.Fprintf(w, "| `%s` | %.2f× | %s | %s |\n", r.impl.Name, r.perSec/en.perSec, cpu, latency(r.p99, true))
		}
	case servicebench.Remote:
		remote, local := sec.find(remoteImpl), sec.find(redisStoreImpl)
		if remote == nil || local == nil {
			return
		}
		rt, lt := remote.totalUs(), local.totalUs()
		fmt.Fprintf(w, "\nThe remote store's overhead per decision: %.1f µs of CPU (%.1f µs in all three processes against %.1f µs for the Redis store in the app), %s more at p50 and %s more at p99; %.2f× the Redis store's decisions/s.\n",
			rt-lt, rt, lt, latency(max(remote.p50-local.p50, 0), true), latency(max(remote.p99-local.p99, 0), true), remote.perSec/local.perSec)
	}
}

// writeProfiles writes where ratelimitd's CPU went in the profiled runs:
// one column per profiled row, one line per category.
func (sec *serviceSection) writeProfiles(w io.Writer) {
	var rows []*serviceRow
	for i := range sec.rows {
		if r := &sec.rows[i]; r.ok() && r.profile != nil {
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return
	}
	var cats []string
	for _, r := range rows {
		for _, sh := range r.profile.Shares {
			if !slices.Contains(cats, sh.Category) {
				cats = append(cats, sh.Category)
			}
		}
	}
	// Largest share first, over every profiled row.
	sum := func(c string) float64 {
		var f float64
		for _, r := range rows {
			f += r.profile.Share(c)
		}
		return f
	}
	slices.SortStableFunc(cats, func(a, b string) int {
		sa, sb := sum(a), sum(b)
		switch {
		case sa > sb:
			return -1
		case sa < sb:
			return 1
		}
		return 0
	})
	fmt.Fprintf(w, "\n### Where ratelimitd's CPU goes\n\n")
	fmt.Fprintf(w, "A CPU profile of the ratelimitd process (net/http/pprof, `%s`) during its last measured run; each sample is counted for the innermost frame that is not the Go runtime or a general-purpose standard package (an allocation or a lock counts for the code that made it). Each cell: the share of the server's CPU, and in parentheses the µs of server CPU per check it makes.\n\n", servicebench.PprofFlag)
	header := "| where |"
	sep := "|---|"
	for _, r := range rows {
		header += " `" + r.impl.Name + "` |"
		sep += "---:|"
	}
	fmt.Fprintln(w, header)
	fmt.Fprintln(w, sep)
	for _, c := range cats {
		line := "| " + c + " |"
		for _, r := range rows {
			f := r.profile.Share(c)
			line += fmt.Sprintf(" %.0f%% (%.1f) |", 100*f, f*r.serverUs)
		}
		fmt.Fprintln(w, line)
	}
	line := "| profiled CPU, of wall time |"
	for _, r := range rows {
		line += fmt.Sprintf(" %s in %s |", r.profile.Total.Round(time.Millisecond), r.profile.Duration.Round(time.Millisecond))
	}
	fmt.Fprintln(w, line)
	fmt.Fprintf(w, "\nThe functions with the most CPU of their own (flat), in `%s`:\n\n", rows[0].impl.Name)
	for _, sh := range rows[0].profile.Top {
		fmt.Fprintf(w, "- `%s` %.1f%%\n", sh.Category, 100*sh.Fraction)
	}
}

// totalUs is the CPU per check of every process the row measured.
func (r *serviceRow) totalUs() float64 { return r.serverUs + r.redisUs + r.loadUs }

func (sec *serviceSection) write(w io.Writer) {
	o := sec.opts
	fmt.Fprintf(w, "\n## The rate-limit service: ratelimitd and envoyproxy/ratelimit, %d concurrent callers\n\n", o.callers)
	if sec.err != nil {
		fmt.Fprintf(w, "Not run: %v\n", sec.err)
		return
	}
	rules := strings.TrimSpace(string(servicebench.RulesYAML()))
	fmt.Fprintf(w, "- the servers run as processes bound to 127.0.0.1: **envoyproxy/ratelimit** `%s@%s` (installed by `go install` into the report's cache directory), with `%s REDIS_URL=… RUNTIME_ROOT=DIR` (everything else its defaults: a pool of 10 Redis connections, no pipelining window, no local cache), the rules in `DIR/ratelimit/config/config.yaml`; **ratelimitd** built from `service/cmd/ratelimitd` of this working tree, `ratelimitd serve --rules FILE --grpc-addr … --http-addr … [--redis …] %s` (a store failure would be a denial and fail the run, never an admission made without Redis)\n",
		servicebench.EnvoyRatelimitPackage, servicebench.EnvoyRatelimitVersion, strings.Join(servicebench.EnvoyRatelimitEnv, " "), strings.Join(servicebench.RatelimitdArgs, " "))
	fmt.Fprintf(w, "- one redis-server %s started by the report (`--save \"\" --appendonly no`) for both, FLUSHALL before each run; both servers load the same rules file, in envoyproxy/ratelimit's format:\n\n```yaml\n%s\n```\n\n", sec.version, rules)
	fmt.Fprintf(w, "- one load generator (this process): go-control-plane's `envoy.service.ratelimit.v3` client over %d gRPC connection(s) (an Envoy keeps one per worker thread; -serviceconns), %d callers in a closed loop, each `ShouldRateLimit` one descriptor `(user, N)` of %d users, domain `%s`; the readiness probe checks that both answer with the limit `%d per SECOND` on it; a run with a denial or an error fails\n",
		o.conns, o.callers, servicebench.Identities, servicebench.Domain, servicebench.Rate)
	fmt.Fprintf(w, "- **the servers, redis-server and the load generator share this machine's %d CPUs** (1-minute load average %s during this section): CPU per check is each process's utime+stime (`/proc/PID/stat`, every thread) over the measured interval ÷ checks\n", runtime.NumCPU(), sec.load)
	fmt.Fprintf(w, "- each cell is the median of %d run(s) of %s after %s of warm-up, implementations interleaved and rotated each round; took %s\n\n", o.count, o.measure, o.warmup, sec.took.Round(time.Second))

	for _, g := range []struct {
		group servicebench.Group
		title string
	}{
		{servicebench.Envoy, "Envoy's protocol: ShouldRateLimit, the same descriptors and rules"},
		{servicebench.Native, "ratelimitd's own API on its memory store: single checks and batches"},
		{servicebench.Remote, "The remote store (a middleware deciding through ratelimitd) against sluice's Redis store"},
	} {
		if slices.ContainsFunc(sec.rows, func(r serviceRow) bool { return r.impl.Group == g.group }) {
			fmt.Fprintf(w, "\n### %s\n\n", g.title)
			sec.writeTable(w, g.group)
		}
	}
	sec.writeProfiles(w)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "checks/s: checks completed ÷ wall time of the measured run (a batch call counts its checks); spread is (max−min)/median and best the highest run.")
	fmt.Fprintln(w, "Latency is one call as its caller saw it (queueing in the client included), recorded for every call in a log-linear histogram (≤1.6% error).")
	fmt.Fprintln(w, "With a closed loop of N callers the mean latency is N ÷ calls per second (Little's law). In parentheses: the process's CPU time ÷ wall time (100% = one CPU).")
	fmt.Fprintln(w, "envoyproxy/ratelimit counts a fixed window per descriptor value and unit (INCRBY + EXPIRE, pipelined per request) and lets concurrent descriptors race;")
	fmt.Fprintln(w, "ratelimitd decides each request's descriptors all or nothing with the rule's exact algorithm.")
}
