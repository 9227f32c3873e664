package main

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/servicebench"
)

// serviceTables are the tables of the section, in order.
var serviceTables = []struct {
	group servicebench.Group
	title string
}{
	{servicebench.Envoy, "Envoy's protocol: ShouldRateLimit, the same descriptors and rules"},
	{servicebench.Native, "ratelimitd's own API: CheckRateLimit, one check per call"},
	{servicebench.Batch, fmt.Sprintf("CheckRateLimitBatch of %d checks", servicebench.BatchSize)},
	{servicebench.HTTP, "The HTTP JSON check"},
	{servicebench.Remote, "The remote store (a middleware deciding through ratelimitd) against sluice's Redis store"},
}

func (sec *serviceSection) write(w io.Writer) {
	fmt.Fprintf(w, "\n## The rate-limit service: ratelimitd, envoyproxy/ratelimit and the grpc-go floor, %d concurrent callers\n\n", sec.opts.callers)
	if sec.err != nil {
		fmt.Fprintf(w, "Not run: %v\n", sec.err)
		return
	}
	sec.writeSetup(w)
	for _, g := range serviceTables {
		if !slices.ContainsFunc(sec.rows, func(r serviceRow) bool { return r.impl.Group == g.group && !r.impl.Tuning }) {
			continue
		}
		fmt.Fprintf(w, "\n### %s\n\n", g.title)
		switch g.group {
		case servicebench.Batch:
			sec.writeBatch(w)
		default:
			sec.writeTable(w, g.group, false)
		}
		sec.writeRatios(w, g.group)
	}
	sec.writeOpen(w)
	sec.writeConfigs(w)
	sec.writeProfiles(w)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Each cell is the median over the runs, in parentheses their range (lowest–highest) when they differ. checks/s: checks completed ÷ wall time of the measured run (a batch call counts its checks).")
	fmt.Fprintln(w, "Latency is one call as its caller saw it (queueing in the client included), recorded for every call in a log-linear histogram (≤1.6% error).")
	fmt.Fprintln(w, "busy: each process's CPU time ÷ wall time (100% = one CPU). envoyproxy/ratelimit counts a fixed window per descriptor value and unit (INCRBY + EXPIRE, pipelined per request) and lets concurrent descriptors race;")
	fmt.Fprintln(w, "ratelimitd decides each request's descriptors all or nothing with the rule's exact algorithm.")
}

func (sec *serviceSection) writeSetup(w io.Writer) {
	o := sec.opts
	rules := strings.TrimSpace(string(servicebench.RulesYAML()))
	fmt.Fprintf(w, "- **envoyproxy/ratelimit** `%s@%s` (installed by `go install` into the report's cache directory), with `%s REDIS_URL=… RUNTIME_ROOT=DIR`, the rules in `DIR/ratelimit/config/config.yaml`, in two configurations: `%s`, its defaults as its README and docker-compose run it (stats to stderr through gostats' logging sink, a pool of 10 Redis connections, no window, no local cache), and `%s`, its best documented configuration: `%s` (see *envoyproxy/ratelimit's configurations* below)\n",
		servicebench.EnvoyRatelimitPackage, servicebench.EnvoyRatelimitVersion, strings.Join(servicebench.EnvoyRatelimitEnv, " "), envoyDefaultImpl, envoyBestImpl, strings.Join(servicebench.EnvoyBestEnv, " "))
	fmt.Fprintf(w, "- **ratelimitd** built from `service/cmd/ratelimitd` of this working tree, `ratelimitd serve --rules FILE --grpc-addr … --http-addr … [--redis …] %s` (a store failure would be a denial and fail the run, never an admission made without Redis)\n",
		strings.Join(servicebench.RatelimitdArgs, " "))
	fmt.Fprintf(w, "- **the grpc-go floor** (`bench/cmd/grpcfloor`, built by the report): a grpc-go server whose ShouldRateLimit and CheckRateLimit handlers return one response built at start, doing no work; its server options are ratelimitd's (`remotestore.ServerOptions`, the function `ratelimitd serve` calls; `TestServerOptionsInStep` fails when ratelimitd's server uses an option the floor does not), and so is its garbage collector target (`remotestore.DefaultGCPercent`, `--gc-percent`'s default), without ratelimitd's metrics interceptor; %s\n", sec.grpcLine())
	fmt.Fprintf(w, "- one redis-server %s started by the report (`--save \"\" --appendonly no`) for all, FLUSHALL before each run; the ShouldRateLimit servers load the same rules file, in envoyproxy/ratelimit's format; ratelimitd's own API runs under the same limit in sluice's format (`servicebench.NativeRulesYAML`: a token bucket of %d/s per user):\n\n```yaml\n%s\n```\n\n",
		sec.version, servicebench.Rate, rules)
	fmt.Fprintf(w, "- one load generator (this process): %d callers in a closed loop over %d gRPC connections (round robin; an Envoy keeps one per worker thread; -serviceconns), each call one check of one of %d users; go-control-plane's `envoy.service.ratelimit.v3` client for ShouldRateLimit (one descriptor `(user, N)`, domain `%s`), sluice's generated client for the native API, and for the HTTP JSON check net/http's client with keep-alive (one connection per caller: HTTP/1.1 has one request in flight per connection); the readiness probe checks the limit `%d per SECOND` on the answer; a run with a denial or an error fails\n",
		o.callers, o.conns, servicebench.Identities, servicebench.Domain, servicebench.Rate)
	fmt.Fprintf(w, "- **the servers, redis-server and the load generator share this machine's %d CPUs** (1-minute load average %s during this section). CPU per check: the server's utime+stime (`/proc/PID/stat`, every thread, 10 ms ticks) over the measured interval ÷ checks; redis-server's main thread (`INFO cpu`, µs); the load generator's own, getrusage(RUSAGE_SELF) of this process (every thread, µs): during a run it runs only the callers (and, in a profiled run, the one HTTP request that fetches the profile). The servers write their logs to files, so a server's logging costs the server, not the load generator\n",
		runtime.NumCPU(), sec.load)
	fmt.Fprintf(w, "- %d rounds; each round runs every row once closed loop (%s after %s of warm-up) and the rows of the latency table once open loop (%s at %.0f calls/s), round robin, each round starting one run further; ratios are computed within each round (both sides measured minutes apart at most) and their median and range over the rounds given; took %s\n\n",
		o.count, o.measure, o.warmup, o.openTime, o.openRate, sec.took.Round(time.Second))
}

// grpcLine says which grpc-go ratelimitd and the floor link.
func (sec *serviceSection) grpcLine() string {
	switch {
	case sec.grpcErr != "":
		return "grpc-go versions unknown: " + cell(sec.grpcErr)
	case sec.grpcRatelimitd == "":
		return "grpc-go versions not read (ratelimitd or the floor not run)"
	case sec.grpcRatelimitd != sec.grpcFloor:
		return fmt.Sprintf("**grpc-go %s in ratelimitd but %s in the floor: the floor is not ratelimitd's gRPC**", sec.grpcRatelimitd, sec.grpcFloor)
	}
	return fmt.Sprintf("both link grpc-go %s (their binaries' build info)", sec.grpcRatelimitd)
}

// withRange writes sp's median with format, and its range (without the ×
// of a ratio) if it has one.
func withRange(sp span, format string) string {
	v := fmt.Sprintf(format, sp.med)
	bare := strings.TrimSuffix(format, "×")
	lo, hi := fmt.Sprintf(bare, sp.lo), fmt.Sprintf(bare, sp.hi)
	if sp.n < 2 || lo == hi {
		return v
	}
	return v + " (" + lo + "–" + hi + ")"
}

// configOf says how a row's server is configured.
func configOf(im servicebench.Impl) string {
	switch {
	case im.Group == servicebench.Remote:
		return im.API
	case im.Config != "":
		return im.Config
	case im.Redis:
		return "`--redis`"
	}
	return "its memory store"
}

// rowName is a row's name as the tables write it.
func rowName(r *serviceRow) string {
	if r.impl.Server == servicebench.Ratelimitd {
		return "**`" + r.impl.Name + "`**"
	}
	return "`" + r.impl.Name + "`"
}

// notRun is the cell of a row without results, or "".
func notRun(r *serviceRow) string {
	switch {
	case r.skipped != "":
		return "skipped: " + cell(r.skipped)
	case !r.ok():
		return "FAILED: " + cell(r.failed)
	}
	return ""
}

// writeTable writes the rows of group g (its tuning variants if tuning).
func (sec *serviceSection) writeTable(w io.Writer, g servicebench.Group, tuning bool) {
	fmt.Fprintln(w, "| implementation | server | store | configuration | checks/s | p50 | p99 | p99.9 | server CPU µs/check | redis CPU µs/check | load generator CPU µs/check | busy: server / redis / load generator |")
	fmt.Fprintln(w, "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for i := range sec.rows {
		r := &sec.rows[i]
		if r.impl.Group != g || r.impl.Tuning != tuning {
			continue
		}
		cells := []string{rowName(r), r.impl.Server.String(), r.impl.Store(), configOf(r.impl)}
		if why := notRun(r); why != "" {
			fmt.Fprintf(w, "| %s | %s |%s\n", strings.Join(cells, " | "), why, strings.Repeat(" |", 7))
			continue
		}
		server, redis, busy := "—", "—", "—"
		if r.impl.Server != servicebench.InProcess {
			server = withRange(r.figure(serverUs), "%.1f")
			busy = fmt.Sprintf("%.0f%%", 100*r.serverBusy)
		} else {
			busy = "—"
		}
		if r.impl.Redis {
			redis = withRange(r.figure(redisUs), "%.1f")
			busy += fmt.Sprintf(" / %.0f%%", 100*r.redisBusy)
		} else {
			busy += " / —"
		}
		busy += fmt.Sprintf(" / %.0f%%", 100*r.lgB)
		cells = append(cells, withRange(r.figure(perSec), "%.0f"), latency(r.p50, true), latency(r.p99, true), latency(r.p999, true),
			server, redis, withRange(r.figure(loadUs), "%.1f"), busy)
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
}

// writeBatch writes the batch rows: decisions per second of server CPU.
func (sec *serviceSection) writeBatch(w io.Writer) {
	fmt.Fprintf(w, "Each call checks %d users (N … N+%d), each decided on its own; a decision is one check.\n\n", servicebench.BatchSize, servicebench.BatchSize-1)
	fmt.Fprintln(w, "| implementation | store | decisions/s | p50 of a call | p99 of a call | p99.9 of a call | decisions per second of server CPU | server CPU µs/decision | redis CPU µs/decision | load generator CPU µs/decision |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for i := range sec.rows {
		r := &sec.rows[i]
		if r.impl.Group != servicebench.Batch {
			continue
		}
		if why := notRun(r); why != "" {
			fmt.Fprintf(w, "| %s | %s | %s |%s\n", rowName(r), r.impl.Store(), why, strings.Repeat(" |", 7))
			continue
		}
		redis := "—"
		if r.impl.Redis {
			redis = withRange(r.figure(redisUs), "%.2f")
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", rowName(r), r.impl.Store(), withRange(r.figure(perSec), "%.0f"),
			latency(r.p50, true), latency(r.p99, true), latency(r.p999, true), withRange(r.figure(perServerSecond), "%.0f"),
			withRange(r.figure(serverUs), "%.2f"), redis, withRange(r.figure(loadUs), "%.2f"))
	}
}

// ratioCell is a per-round ratio of rows a and b, or "—".
func ratioCell(a, b *serviceRow, f func(servicebench.Sample) float64) string {
	if a == nil || b == nil {
		return "—"
	}
	sp := roundRatio(a, b, f)
	if sp.n == 0 {
		return "—"
	}
	return withRange(sp, "%.2f×")
}

// writeRatios writes the ratios of group g's rows to their references,
// per round.
func (sec *serviceSection) writeRatios(w io.Writer, g servicebench.Group) {
	best := sec.find(envoyBestImpl)
	switch g {
	case servicebench.Envoy, servicebench.Native:
		floor := sec.find(floorImpl)
		names := []string{envoyDefaultImpl, floorImpl, ratelimitdRedis, ratelimitdMemory}
		if g == servicebench.Native {
			floor, names = sec.find(floorNativeImpl), []string{floorNativeImpl, nativeRedisImpl, nativeMemoryImpl}
		}
		if best == nil && floor == nil {
			return
		}
		fmt.Fprintf(w, "\nRatios to the anchor `%s` (ShouldRateLimit) and to the floor, computed in each round:\n\n", envoyBestImpl)
		fmt.Fprintln(w, "| row | server CPU ÷ envoy best | server CPU ÷ floor | Redis CPU ÷ envoy best | checks/s ÷ envoy best | load generator CPU ÷ envoy best |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|")
		for _, n := range names {
			r := sec.find(n)
			if r == nil {
				continue
			}
			redis := "—"
			if r.impl.Redis {
				redis = ratioCell(r, best, redisUs)
			}
			fmt.Fprintf(w, "| `%s` | %s | %s | %s | %s | %s |\n", n, ratioCell(r, best, serverUs), ratioCell(r, floor, serverUs), redis,
				ratioCell(r, best, perSec), ratioCell(r, best, loadUs))
		}
	case servicebench.HTTP:
		fmt.Fprintf(w, "\nThe HTTP JSON check against the native CheckRateLimit on the same store, computed in each round:\n\n")
		fmt.Fprintln(w, "| row | server CPU ÷ native | checks/s ÷ native | load generator CPU ÷ native |")
		fmt.Fprintln(w, "|---|---:|---:|---:|")
		for _, p := range [][2]string{{httpRedisImpl, nativeRedisImpl}, {httpMemoryImpl, nativeMemoryImpl}} {
			a, b := sec.find(p[0]), sec.find(p[1])
			if a == nil || b == nil {
				continue
			}
			fmt.Fprintf(w, "| `%s` ÷ `%s` | %s | %s | %s |\n", p[0], p[1], ratioCell(a, b, serverUs), ratioCell(a, b, perSec), ratioCell(a, b, loadUs))
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

// totalUs is the CPU per check of every process the row measured.
func (r *serviceRow) totalUs() float64 { return r.serverUs + r.redisUs + r.loadUs }

// writeOpen writes the open-loop runs and what they answer.
func (sec *serviceSection) writeOpen(w io.Writer) {
	o := sec.opts
	if !slices.ContainsFunc(sec.rows, func(r serviceRow) bool { return r.ol.runs > 0 }) {
		return
	}
	fmt.Fprintf(w, "\n### Latency at a fixed offered rate (open loop)\n\n")
	fmt.Fprintf(w, "With %d callers in a closed loop the machine is saturated: the servers, redis-server and the load generator share %d CPUs, the load generator itself spends tens of µs per check, so throughput is whatever the machine has left and the mean latency is %d ÷ throughput (Little's law), whichever server it is. A closed-loop p99 measures that queue, not the server. ", o.callers, runtime.NumCPU(), o.callers)
	fmt.Fprintf(w, "So every ShouldRateLimit server, and the native check on Redis with its floor, is also run **open loop**: %.0f calls per second offered on a fixed schedule (call i due at start + i ÷ rate) for %s, by up to %d callers in flight, far below what any of them sustains here. The latency of a call runs from the time it was due (a call that waits for a free caller, or that the load generator sends late, counts that wait); each figure is the median of the runs (%d), as everywhere in this document, and *all calls* the p99 of every call of every run together, which a single stalled run dominates; *from the send* leaves out the load generator's own lateness, which *sent late* shows. **The open-loop p99 answers \"p99 < 5 ms at 64 callers\"**: the latency a caller sees from a server with up to 64 callers in flight when the machine is not the bottleneck; the closed-loop p99 (last column) shows the saturated machine instead.\n\n",
		o.openRate, o.openTime, o.callers, o.count)
	fmt.Fprintln(w, "| implementation | offered calls/s | achieved | p50 | p99 (runs) | p99.9 | all calls: p99, max | p99 from the send | sent late, p99 | most in flight | closed loop: p99 at checks/s | server CPU µs/check | redis-server CPU µs/check |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for i := range sec.rows {
		r := &sec.rows[i]
		if r.ol.runs == 0 {
			continue
		}
		st := r.ol
		runsCell := latency(st.p99, true)
		if st.runs > 1 {
			runsCell = latency(st.p99, true) + " (" + latency(st.p99Lo, true) + "–" + latency(st.p99Hi, true) + ")"
		}
		fmt.Fprintf(w, "| %s | %.0f | %.0f | %s | %s | %s | %s, %s | %s | %s | %d | %s at %.0f | %.1f | %s |\n", rowName(r), st.offered, st.achieved,
			latency(st.p50, true), runsCell, latency(st.p999, true), latency(st.all99, true), latency(st.max, true), latency(st.sent99, true), latency(st.lag99, true),
			st.maxInFlight, latency(r.p99, true), r.perSec, st.serverUs, redisCell(r.impl.Redis, st.redisUs))
	}
	sec.writeOpenRatios(w)
}

// redisCell is a redis-server CPU cell: a dash for a server without one.
func redisCell(redis bool, us float64) string {
	if !redis {
		return "—"
	}
	return fmt.Sprintf("%.1f", us)
}

// writeOpenRatios compares CPU per check at the open loop's offered rate,
// where every server carries the same calls per second: closed loop, a
// server that costs more per check is also given fewer checks per second,
// and each of gRPC's reads and writes then carries fewer calls than the
// floor's.
func (sec *serviceSection) writeOpenRatios(w io.Writer) {
	for _, p := range []struct{ row, floor string }{{"ratelimitd-redis", "grpc-floor"}, {"ratelimitd-redis-native", "grpc-floor-native"}} {
		r, f, best := sec.find(p.row), sec.find(p.floor), sec.find(envoyBestImpl)
		if r == nil || f == nil || r.ol.runs == 0 || f.ol.runs == 0 || f.ol.serverUs == 0 {
			continue
		}
		fmt.Fprintf(w, "\nAt the same offered rate, `%s` spent %.2f× the server CPU per check of `%s`", p.row, r.ol.serverUs/f.ol.serverUs, p.floor)
		if best != nil && best.ol.runs > 0 && best.ol.serverUs > 0 && best.ol.redisUs > 0 {
			fmt.Fprintf(w, ", %.2f× `%s`'s, and %.2f× its redis-server CPU", r.ol.serverUs/best.ol.serverUs, envoyBestImpl, r.ol.redisUs/best.ol.redisUs)
		}
		fmt.Fprintln(w, " (medians of the open-loop runs; the targets above are read closed loop).")
	}
}

// writeConfigs says how envoyproxy/ratelimit's configurations were chosen,
// with the tuning variants' rows if they ran.
func (sec *serviceSection) writeConfigs(w io.Writer) {
	def, best := sec.find(envoyDefaultImpl), sec.find(envoyBestImpl)
	if def == nil && best == nil {
		return
	}
	fmt.Fprintf(w, "\n### envoyproxy/ratelimit's configurations\n\n")
	fmt.Fprintf(w, "- `%s`: its settings' own default is `USE_STATSD=true`, a statsd sink on localhost:8125 that nothing here listens on; its README and docker-compose.yml run it with `USE_STATSD=false`, which sends its stats to gostats' logging sink: every counter on each flush and every timer value as it is recorded, one JSON line on stderr per call (its response_time timer)", envoyDefaultImpl)
	if def != nil {
		fmt.Fprintf(w, ", here %.0f bytes per check", def.logBytes)
	}
	fmt.Fprintln(w, "; the counters are kept per descriptor key and the logging costs it one write per call.")
	fmt.Fprintf(w, "- `%s`: `%s`. `DISABLE_STATS=true` puts a null sink in place of every stat; the local cache (freecache, %d MiB) remembers the keys found over their limit so that they are refused without Redis (none is in this load: it costs a lookup per descriptor); at this version `REDIS_PIPELINE_WINDOW` sets the write flush interval of Redis **Cluster** connections only (`src/redis/driver_impl.go`): on a single node every command is written at once whatever it says, and `REDIS_PIPELINE_LIMIT` is ignored (deprecated in radix v4). What pipelines its commands on a single node is the pool: radix v4 shares each connection between concurrent calls, so the fewer connections (`REDIS_POOL_SIZE`, 10 by default), the more commands each write and read carries; %d cost redis-server the least here. ",
		envoyBestImpl, strings.Join(servicebench.EnvoyBestEnv, " "), servicebench.EnvoyLocalCacheBytes>>20, servicebench.EnvoyPoolSize)
	fmt.Fprintf(w, "The variants below (stats off, one setting each) measured the cache, the windows its README recommends and the pool size on this load; `go run ./cmd/report -scenarios service -impls envoy-ratelimit-best,envoy-ratelimit-tune` runs them again.\n")
	if slices.ContainsFunc(sec.rows, func(r serviceRow) bool { return r.impl.Tuning }) {
		fmt.Fprintln(w)
		sec.writeTable(w, servicebench.Envoy, true)
	}
}

// writeProfiles writes where ratelimitd's (and the floor's) CPU went in the
// profiled runs, then what ratelimitd spends beyond the floor.
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
	cats := profileCategories(rows)
	fmt.Fprintf(w, "\n### Where ratelimitd's CPU goes\n\n")
	fmt.Fprintf(w, "A CPU profile of the ratelimitd and floor processes (net/http/pprof, `%s`) during their last closed-loop run (made at least %s long); each sample is counted for the innermost frame that is not the Go runtime or a general-purpose standard package (an allocation or a lock counts for the code that made it). Each cell: the share of the server's CPU, and in parentheses the µs of server CPU per check it makes.\n\n", servicebench.PprofFlag, profileTime)
	header, sep := "| where |", "|---|"
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
	line := "| profiled CPU, of wall time (samples) |"
	for _, r := range rows {
		line += fmt.Sprintf(" %s in %s (%d) |", r.profile.Total.Round(time.Millisecond), r.profile.Duration.Round(time.Millisecond), r.profile.Total/profileTick)
	}
	fmt.Fprintln(w, line)
	fmt.Fprintf(w, "\nA sample is %s of CPU (pprof's 100 Hz): with a hundred or so per column, a share of a few percent is a sample or two, so compare the large categories; `-serviceprofiledir DIR` keeps the profiles for `go tool pprof`.\n", profileTick)
	sec.writeVsFloor(w, cats)
	top := rows[0]
	if r := sec.find(ratelimitdRedis); r != nil && r.profile != nil {
		top = r
	}
	fmt.Fprintf(w, "\nThe functions with the most CPU of their own (flat), in `%s`:\n\n", top.impl.Name)
	for _, sh := range top.profile.Top {
		fmt.Fprintf(w, "- `%s` %.1f%%\n", sh.Category, 100*sh.Fraction)
	}
	writeLeft(w)
}

// profileTick is the CPU time of one sample of a pprof CPU profile.
const profileTick = 10 * time.Millisecond

// profileCategories are the categories of rows' profiles, largest share
// (over all of them) first.
func profileCategories(rows []*serviceRow) []string {
	var cats []string
	for _, r := range rows {
		for _, sh := range r.profile.Shares {
			if !slices.Contains(cats, sh.Category) {
				cats = append(cats, sh.Category)
			}
		}
	}
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
	return cats
}

// floorPairs are the ratelimitd rows compared with a floor, by category.
var floorPairs = [][2]string{{ratelimitdRedis, floorImpl}, {ratelimitdMemory, floorImpl}, {nativeRedisImpl, floorNativeImpl}}

// writeVsFloor writes, per category, the µs per check ratelimitd spends
// beyond the floor serving the same calls.
func (sec *serviceSection) writeVsFloor(w io.Writer, cats []string) {
	type pair struct{ self, floor *serviceRow }
	var ps []pair
	for _, p := range floorPairs {
		a, b := sec.find(p[0]), sec.find(p[1])
		if a != nil && b != nil && a.profile != nil && b.profile != nil {
			ps = append(ps, pair{a, b})
		}
	}
	if len(ps) == 0 {
		return
	}
	fmt.Fprintf(w, "\n#### What is left against the floor\n\n")
	fmt.Fprintln(w, "The same calls, µs of server CPU per check by category: the floor (gRPC, HTTP/2 and protobuf around a handler that does nothing), ratelimitd, and what ratelimitd spends beyond the floor (Δ). gRPC's own work should be level; what is left is ratelimitd's.")
	fmt.Fprintln(w)
	header, sep := "| where |", "|---|"
	for _, p := range ps {
		header += fmt.Sprintf(" `%s` | `%s` | Δ |", p.floor.impl.Name, p.self.impl.Name)
		sep += "---:|---:|---:|"
	}
	fmt.Fprintln(w, header)
	fmt.Fprintln(w, sep)
	us := func(r *serviceRow, c string) float64 { return r.profile.Share(c) * r.serverUs }
	for _, c := range cats {
		line := "| " + c + " |"
		for _, p := range ps {
			a, b := us(p.self, c), us(p.floor, c)
			line += fmt.Sprintf(" %.1f | %.1f | %+.1f |", b, a, a-b)
		}
		fmt.Fprintln(w, line)
	}
	line := "| all: server CPU per check (median of the runs) |"
	for _, p := range ps {
		line += fmt.Sprintf(" %.1f | %.1f | %+.1f |", p.floor.serverUs, p.self.serverUs, p.self.serverUs-p.floor.serverUs)
	}
	fmt.Fprintln(w, line)
	for _, p := range ps {
		fmt.Fprintf(w, "\n`%s` spends %.1f µs per check beyond `%s` (%.2f× its CPU); the largest parts: %s.\n", p.self.impl.Name,
			p.self.serverUs-p.floor.serverUs, p.floor.impl.Name, p.self.serverUs/p.floor.serverUs, largestDeltas(cats, func(c string) float64 { return us(p.self, c) - us(p.floor, c) }, 4))
	}
}

// largestDeltas names the n categories of cats with the largest delta.
func largestDeltas(cats []string, delta func(string) float64, n int) string {
	cs := slices.Clone(cats)
	slices.SortStableFunc(cs, func(a, b string) int {
		da, db := delta(a), delta(b)
		switch {
		case da > db:
			return -1
		case da < db:
			return 1
		}
		return 0
	})
	var parts []string
	for _, c := range cs[:min(n, len(cs))] {
		if delta(c) <= 0 {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %+.1f µs", c, delta(c)))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
