// Command report runs the benchmarks of module
// github.com/sluicehq/sluice/bench for sluice and its peers several times,
// interleaving the implementations, and writes the medians as Markdown tables
// with the targets, the ratios, the machine, the peers' module versions and
// the commands, plus an SVG chart of the ratios. Four areas:
//
//   - in memory (package membench): HotKeySerial, HotKeyParallel,
//     Keys100kSerial, Keys100kParallel, HeapPerKey;
//   - middleware (package mwbench): MiddlewareOverhead (net/http) and
//     FiberMiddlewareOverhead (Fiber);
//   - Redis (package redisbench): Redis64Callers and RedisMemoryPerKey, on a
//     redis-server the report starts and stops itself;
//   - churn (membench.Churn): ChurnLatency, sluice's hot-key decision latency
//     while millions of short-lived keys churn, with the sweeper on and off;
//   - the service (package servicebench): Service64Callers, ratelimitd,
//     envoyproxy/ratelimit (its default and its best configuration) and the
//     bare grpc-go floor as processes on one redis-server, answering
//     ShouldRateLimit, ratelimitd's native API, batches and HTTP JSON checks
//     from one load generator, closed and open loop;
//   - ratelimitd's rules at scale (package rulesbench): RulesAtScale, its
//     engine's decision latency, build time and memory with 10 to 100 000
//     rules, and a SQLite rules database of that size;
//   - ratelimitd under rule churn (servicebench.RunChurn): RuleChurn,
//     the service scenario's ratelimitd-redis with one rule change per
//     second against none;
//   - propagation (package propbench): Propagation, two ratelimitd
//     instances on one PostgreSQL, the delay from a rule change to the
//     first decision under it on the other instance;
//   - leases (package leasebench): Leases, the lease layer against the
//     exact Redis path: one hot identity from four processes, a leased
//     decision's latency, a global limit from eight instances, many
//     identities per algorithm, Redis killed under a leased instance.
//
// Usage (from the bench directory):
//
//	go run ./cmd/report [-out ../docs] [-quick] [-scenarios hot,parallel,heap,middleware,fiber,redis,...]
//	    [-impls sluice,ulule,...] [-count 5] [-heapcount 3] [-benchtime 400ms] [-heapkeys 1000000]
//	    [-rediscount 3] [-redistime 1500ms] [-rediswarmup 250ms] [-callers 64] [-ceilingn 150000]
//	    [-rediskeys 50000] [-churntime 10s] [-churncount 1]
//	    [-servicecount 3] [-servicetime 1.5s] [-servicewarmup 300ms] [-serviceopenrate 3000] [-serviceopentime 1.5s] [-serviceconns 4]
//	    [-servicedir ../service] [-servicecache DIR] [-serviceprofile=false] [-serviceprofiledir DIR]
//	    [-rulescount 7] [-rulestime 200ms] [-churnservicecount 3] [-propchanges 100] [-propbigrules 100000] [-propbigchanges 10]
//
// Without -out the Markdown goes to stdout (and no chart is written); with
// -out DIR it goes to DIR/benchmarks.md and the chart to DIR/benchmarks.svg.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench/leasebench"
	"github.com/sluicehq/sluice/bench/membench"
	"github.com/sluicehq/sluice/bench/redisbench"
	"github.com/sluicehq/sluice/bench/servicebench"
)

// Names of the scenarios outside package membench.
const (
	middlewareScenario  = "MiddlewareOverhead"
	fiberScenario       = "FiberMiddlewareOverhead"
	redisScenario       = "Redis64Callers"
	redisMemoryScenario = "RedisMemoryPerKey"
	churnScenario       = "ChurnLatency"
	serviceScenario     = "Service64Callers"
	rulesScenario       = "RulesAtScale"
	ruleChurnScenario   = "RuleChurn"
	propScenario        = "Propagation"
)

// Output file names under -out.
const (
	mdName  = "benchmarks.md"
	svgName = "benchmarks.svg"
)

// options are the parsed flags.
type options struct {
	out                   string
	quick                 bool
	count, heapCount      int
	benchtime             time.Duration
	heapKeys              int
	redisCount            int
	redisTime, redisWarm  time.Duration
	callers, ceilingN     int
	redisKeys             int
	churnTime             time.Duration
	churnCount            int
	serviceCount          int
	serviceTime           time.Duration
	serviceWarm           time.Duration
	serviceOpenRate       float64
	serviceOpenTime       time.Duration
	serviceConns          int
	serviceDir            string
	serviceCache          string
	serviceProfile        bool
	serviceProfileDir     string
	rulesCount            int
	rulesTime             time.Duration
	churnServiceCount     int
	propChanges           int
	propBigRules          int
	propBigChanges        int
	scenarios, impls      string
	cpuProfile            string
	args                  []string // as given, for the Commands section
	quickDefaults, chosen []string // flags -quick lowered; flags set explicitly
}

// quickValues are the flag values -quick uses unless a flag is set
// explicitly: about a minute for a look at the ranking, not for figures.
var quickValues = map[string]string{
	"count": "2", "heapcount": "1", "benchtime": "100ms", "heapkeys": "200000",
	"rediscount": "1", "redistime": "500ms", "rediswarmup": "100ms", "ceilingn": "40000", "rediskeys": "10000",
	"churntime":    "2s",
	"servicecount": "1", "servicetime": "1s", "servicewarmup": "200ms", "serviceopentime": "1s",
	"rulescount": "2", "rulestime": "100ms", "churnservicecount": "1", "propchanges": "20", "propbigrules": "0",
}

// parseFlags parses the command line, printing usage and errors to stderr.
func parseFlags(args []string) (options, error) { return parseFlagsTo(os.Stderr, args) }

func parseFlagsTo(out io.Writer, args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.SetOutput(out)
	o.define(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run ./cmd/report [flags]\n\nRuns the rate-limiter benchmarks of sluice and its peers and writes Markdown tables\n(and, with -out, an SVG chart).\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	fs.Visit(func(f *flag.Flag) { o.chosen = append(o.chosen, f.Name) })
	if o.quick {
		if err := o.applyQuick(fs); err != nil {
			return o, err
		}
	}
	o.args = args
	if o.invalid(fs) {
		fs.Usage()
		return o, fmt.Errorf("invalid arguments")
	}
	return o, nil
}

// define defines the report's flags on fs, into o.
func (o *options) define(fs *flag.FlagSet) {
	fs.StringVar(&o.out, "out", "", "directory to write "+mdName+" and "+svgName+" to (e.g. ../docs); without it the Markdown goes to stdout")
	fs.BoolVar(&o.quick, "quick", false, "a quick run (about a minute): "+quickSummary()+", unless set explicitly")
	fs.StringVar(&o.scenarios, "scenarios", "all", "comma-separated scenarios to run, matched case-insensitively against their names\n(HotKeySerial, HotKeyParallel, Keys100kSerial, Keys100kParallel, HeapPerKey, MiddlewareOverhead,\nFiberMiddlewareOverhead, Redis64Callers, RedisMemoryPerKey, ChurnLatency, Service64Callers, RulesAtScale,\nRuleChurn, Propagation, Leases: e.g. hot,parallel,heap,middleware,fiber,redis,churn,service,rules,rulechurn,propagation,leases), or all")
	fs.StringVar(&o.impls, "impls", "default", "comma-separated implementations to run, default or all. A name selects itself and the variants\nnamed after it (sluice selects sluice-xrl and sluice-gcra-nopipe too). default is all but the\nunpipelined Redis variants of sluice's algorithms other than token_bucket. In memory: sluice, xrate,\nsethvargo, ulule, throttled. Middleware: bare (always run), sluice, sluice-xrl, ulule, httprate,\nthrottled, sethvargo; Fiber: bare, sluice, sluice-xrl, fiber, fiber-sliding. Redis: sluice-<algorithm>[-nopipe],\nulule, redis_rate, throttled, evalsha, redis-benchmark, redis-benchmark-P16. Service: envoy-ratelimit-default,\nenvoy-ratelimit-best, grpc-floor[-native], ratelimitd-redis[-native,-batch100,-http], ratelimitd-memory[-...]\n(ratelimitd selects every ratelimitd-*), remotestore, redisstore, and envoy-ratelimit-tune-* (the variants that\nchose envoy-ratelimit-best, not in default)")
	fs.IntVar(&o.count, "count", 5, "runs of each in-memory throughput and middleware benchmark; the tables show the medians")
	fs.IntVar(&o.heapCount, "heapcount", 3, "runs of each heap benchmark (its bytes/key barely varies; each run fills -heapkeys keys)")
	fs.DurationVar(&o.benchtime, "benchtime", 400*time.Millisecond, "target duration of each run of the in-memory throughput and middleware scenarios\n(the heap scenario always does one fill per run)")
	fs.IntVar(&o.heapKeys, "heapkeys", membench.HeapKeys, "distinct keys the heap scenario inserts")
	fs.IntVar(&o.redisCount, "rediscount", 3, "runs of each Redis implementation in the throughput scenario")
	fs.DurationVar(&o.redisTime, "redistime", 1500*time.Millisecond, "measured duration of each Redis run")
	fs.DurationVar(&o.redisWarm, "rediswarmup", 250*time.Millisecond, "unmeasured load before each Redis run (fills the pool, loads the scripts)")
	fs.IntVar(&o.callers, "callers", redisbench.Callers, "concurrent callers of the Redis scenarios")
	fs.IntVar(&o.ceilingN, "ceilingn", 150_000, "requests (-n) of each redis-benchmark run")
	fs.IntVar(&o.redisKeys, "rediskeys", 50_000, "identities the Redis memory scenario inserts")
	fs.DurationVar(&o.churnTime, "churntime", 10*time.Second, "timed duration of each churn run (sweeper on, then off)")
	fs.IntVar(&o.churnCount, "churncount", 1, "runs of each churn variant; the table shows the medians")
	fs.IntVar(&o.serviceCount, "servicecount", 3, "rounds of the service section: each runs every implementation once, interleaved, and the ratios are\ncomputed per round")
	fs.DurationVar(&o.serviceTime, "servicetime", 1500*time.Millisecond, "measured duration of each closed-loop service run")
	fs.DurationVar(&o.serviceWarm, "servicewarmup", 300*time.Millisecond, "unmeasured load before each service run")
	fs.Float64Var(&o.serviceOpenRate, "serviceopenrate", servicebench.OpenRate, "calls per second offered in the service's open-loop runs (their latency answers the p99 target)")
	fs.DurationVar(&o.serviceOpenTime, "serviceopentime", 1500*time.Millisecond, "measured duration of each open-loop service run")
	fs.IntVar(&o.serviceConns, "serviceconns", servicebench.Conns, "gRPC connections of the service load generator to a server")
	fs.StringVar(&o.serviceDir, "servicedir", "../service", "the service module, whose cmd/ratelimitd the service scenario builds")
	fs.StringVar(&o.serviceCache, "servicecache", "", "directory envoyproxy/ratelimit is installed into (default $"+servicebench.CacheEnv+" or the user's cache directory, sluice-bench)")
	fs.BoolVar(&o.serviceProfile, "serviceprofile", true, "profile ratelimitd (its "+servicebench.PprofFlag+" listener) during the last run of each of its implementations")
	fs.StringVar(&o.serviceProfileDir, "serviceprofiledir", "", "also write each ratelimitd profile to DIR/<implementation>.pprof (for go tool pprof)")
	fs.IntVar(&o.rulesCount, "rulescount", 7, "runs of the rules-at-scale checks per rule count")
	fs.DurationVar(&o.rulesTime, "rulestime", 200*time.Millisecond, "duration of each run of the rules-at-scale checks")
	fs.IntVar(&o.churnServiceCount, "churnservicecount", 3, "runs of each variant (no rule change, one per second) of the service under rule churn;\nit uses -servicetime and -servicewarmup")
	fs.IntVar(&o.propChanges, "propchanges", 100, "rule changes of the propagation scenario")
	fs.IntVar(&o.propBigRules, "propbigrules", 100_000, "the propagation scenario again with this many rules stored (0 or 1: not)")
	fs.IntVar(&o.propBigChanges, "propbigchanges", 10, "rule changes of the propagation scenario with -propbigrules rules")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole report to this file")
}

// applyQuick sets the flags of quickValues not set explicitly to their
// quick values.
func (o *options) applyQuick(fs *flag.FlagSet) error {
	for name, v := range quickValues {
		if !slices.Contains(o.chosen, name) {
			if err := fs.Set(name, v); err != nil {
				return err
			}
			o.quickDefaults = append(o.quickDefaults, name)
		}
	}
	slices.Sort(o.quickDefaults)
	return nil
}

// invalid reports whether a flag is out of range or fs has an argument.
func (o *options) invalid(fs *flag.FlagSet) bool {
	return fs.NArg() > 0 || o.count < 1 || o.heapCount < 1 || o.benchtime <= 0 || o.heapKeys < 1 ||
		o.redisCount < 1 || o.redisTime <= 0 || o.redisWarm < 0 || o.callers < 1 || o.ceilingN < 1 || o.redisKeys < o.callers ||
		o.churnTime <= 0 || o.churnCount < 1 ||
		o.serviceCount < 1 || o.serviceTime <= 0 || o.serviceWarm < 0 || o.serviceConns < 1 || o.serviceOpenRate <= 0 || o.serviceOpenTime <= 0 ||
		o.rulesCount < 1 || o.rulesTime <= 0 || o.churnServiceCount < 1 || o.propChanges < 1 || o.propBigRules < 0 || o.propBigChanges < 1
}

func quickSummary() string {
	names := make([]string, 0, len(quickValues))
	for k := range quickValues {
		names = append(names, k)
	}
	slices.Sort(names)
	var parts []string
	for _, k := range names {
		parts = append(parts, "-"+k+" "+quickValues[k])
	}
	return strings.Join(parts, " ")
}

// selection is what the flags selected.
type selection struct {
	mem          []membench.Scenario
	memImpls     []membench.Impl
	mwImpls      []mwImpl
	fiberImpls   []mwImpl
	rdImpls      []redisbench.Impl
	rdMemImpls   []redisbench.Impl
	svcImpls     []servicebench.Impl
	redis, rdMem bool
	mw, fiber    bool
	churn        bool // sluice only
	rules        bool // ratelimitd only
	ruleChurn    bool // ratelimitd only
	prop         bool // ratelimitd only
	lease        bool // sluice only
}

func selectAll(o options) (selection, error) {
	var s selection
	var err error
	var service bool
	s.mem, s.mw, s.fiber, s.redis, s.rdMem, s.churn, service, s.rules, s.ruleChurn, s.prop, s.lease, err = selectScenarios(o.scenarios)
	if err != nil {
		return s, err
	}
	f, err := newImplFilter(o.impls)
	if err != nil {
		return s, err
	}
	if len(s.mem) > 0 {
		s.memImpls = filterImpls(f, membench.Impls(), func(im membench.Impl) string { return im.Name })
	}
	if s.mw {
		s.mwImpls = withBaseline(filterImpls(f, httpImpls(), func(im mwImpl) string { return im.Name }), httpImpls())
	}
	if s.fiber {
		s.fiberImpls = withBaseline(filterImpls(f, fiberImpls(), func(im mwImpl) string { return im.Name }), fiberImpls())
	}
	if s.redis {
		s.rdImpls = filterImpls(f, redisbench.Impls(), func(im redisbench.Impl) string { return im.Name })
		if f.curated {
			s.rdImpls = slices.DeleteFunc(s.rdImpls, func(im redisbench.Impl) bool {
				return strings.HasSuffix(im.Name, "-nopipe") && im.Name != "sluice-token_bucket-nopipe"
			})
		}
	}
	if s.churn {
		s.churn = f.match("sluice")
	}
	if s.rules {
		s.rules = f.match("ratelimitd")
	}
	if s.ruleChurn {
		s.ruleChurn = f.match(servicebench.ChurnImpl().Name)
	}
	if s.prop {
		s.prop = f.match("ratelimitd")
	}
	if s.lease {
		s.lease = f.match("sluice")
	}
	if s.rdMem {
		s.rdMemImpls = filterImpls(f, memoryImpls(), func(im redisbench.Impl) string { return im.Name })
	}
	if service {
		s.svcImpls = filterImpls(f, servicebench.Impls(), func(im servicebench.Impl) string { return im.Name })
		if f.curated {
			s.svcImpls = slices.DeleteFunc(s.svcImpls, func(im servicebench.Impl) bool { return im.Tuning })
		}
	}
	return s, f.unused()
}

// memoryImpls are the Redis implementations with state of their own: every
// one but the ceilings and the unpipelined variants (their keys are the same).
func memoryImpls() []redisbench.Impl {
	return slices.DeleteFunc(redisbench.Impls(), func(im redisbench.Impl) bool {
		return im.Kind == redisbench.Ceiling || strings.HasSuffix(im.Name, "-nopipe")
	})
}

func withBaseline(sel, all []mwImpl) []mwImpl {
	if slices.ContainsFunc(sel, func(im mwImpl) bool { return im.Baseline }) {
		return sel
	}
	return append([]mwImpl{all[0]}, sel...) // the baseline always runs
}

func main() {
	leasebench.MaybeChild() // the Leases scenario runs this program again as its processes
	o, err := parseFlags(os.Args[1:])
	if err == flag.ErrHelp {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(2)
	}
	sel, err := selectAll(o)
	if err != nil {
		fatal(err)
	}
	membench.HeapKeys = o.heapKeys
	testing.Init() // registers test.benchtime, which testing.Benchmark reads
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatal(err)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	if o.out != "" {
		if st, err := os.Stat(o.out); err != nil || !st.IsDir() {
			fatal(fmt.Errorf("-out %s: not a directory", o.out))
		}
	}

	r := &report{opts: o, sel: sel, start: time.Now(), loadBefore: loadAvg()}
	r.run()
	r.took, r.loadAfter = time.Since(r.start), loadAvg()

	var md bytes.Buffer
	r.write(&md)
	if o.out == "" {
		os.Stdout.Write(md.Bytes())
		return
	}
	var svg bytes.Buffer
	writeChart(&svg, r.chartRows(), r.chartTitle())
	for _, f := range []struct {
		name string
		b    []byte
	}{{mdName, md.Bytes()}, {svgName, svg.Bytes()}} {
		p := filepath.Join(o.out, f.name)
		if err := os.WriteFile(p, f.b, 0o644); err != nil {
			fatal(err)
		}
		fmt.Fprintf(os.Stderr, "report: wrote %s\n", p)
	}
	for _, t := range r.targets() {
		fmt.Fprintf(os.Stderr, "report: target %s: %s (%s)\n", t.name, t.verdict(), t.measured)
	}
}

// report holds one run's results.
type report struct {
	opts  options
	sel   selection
	start time.Time
	took  time.Duration

	loadBefore, loadAfter string

	mem       *memSection
	mw        *mwSection
	fiber     *mwSection
	redis     *redisSection
	redisMem  *redisMemSection
	churn     *churnSection
	service   *serviceSection
	rules     *rulesSection
	ruleChurn *ruleChurnSection
	prop      *propSection
	lease     *leaseSection
	env       environment
}

// section timing shared by every area.
type timing struct {
	took time.Duration
	load string // 1-minute load average before → after
}

func timed(f func()) timing {
	t0, l0 := time.Now(), loadAvg()
	f()
	return timing{took: time.Since(t0), load: l0 + " → " + loadAvg()}
}

func (r *report) run() {
	o, s := r.opts, r.sel
	r.env = readEnvironment()
	if len(s.mem) > 0 && len(s.memImpls) > 0 {
		r.mem = &memSection{scs: s.mem}
		r.mem.timing = timed(func() {
			for _, sc := range s.mem {
				n := o.count
				if sc.Heap {
					n = o.heapCount
				}
				r.mem.rows = append(r.mem.rows, runScenario(sc, s.memImpls, n, o.benchtime)...)
			}
		})
	}
	if len(s.mwImpls) > 0 {
		r.mw = &mwSection{scenario: middlewareScenario}
		r.mw.timing = timed(func() { r.mw.rows = runMiddleware(middlewareScenario, s.mwImpls, o.count, o.benchtime) })
	}
	if len(s.fiberImpls) > 0 {
		r.fiber = &mwSection{scenario: fiberScenario}
		r.fiber.timing = timed(func() { r.fiber.rows = runMiddleware(fiberScenario, s.fiberImpls, o.count, o.benchtime) })
	}
	if len(s.rdImpls) > 0 || len(s.rdMemImpls) > 0 {
		r.runRedis()
	}
	if s.churn {
		r.churn = &churnSection{}
		r.churn.timing = timed(func() { r.churn.run(o.churnTime, o.churnCount) })
	}
	if len(s.svcImpls) > 0 {
		r.runService()
	}
	if s.ruleChurn {
		r.runRuleChurn()
	}
	if s.prop {
		r.runPropagation()
	}
	if s.rules {
		r.rules = &rulesSection{}
		r.rules.timing = timed(func() { r.rules.run(o.rulesCount, o.rulesTime) })
	}
	if s.lease {
		r.runLease()
	}
}

// write writes the whole Markdown document.
func (r *report) write(w io.Writer) {
	fmt.Fprintln(w, "# Benchmarks: sluice and the Go rate limiters you would pick instead")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Generated by `make bench` (the program `bench/cmd/report`) on %s in %s", time.Now().UTC().Format("2006-01-02 15:04 UTC"), r.took.Round(time.Second))
	if r.opts.quick {
		fmt.Fprint(w, ", **in quick mode** (few and short runs: the ranking only, not figures to quote)")
	}
	fmt.Fprintln(w, ". Do not edit by hand: rerun it. Every implementation ran in the same process (and, for Redis, on the same redis-server) in one run, interleaved, so compare rows within a table, not with figures from other machines.")
	r.writeSummary(w)
	r.writeMachine(w)
	r.writeCommands(w)
	if r.mem != nil {
		r.mem.write(w, r.opts)
	}
	if r.mw != nil {
		r.mw.write(w, r.opts)
	}
	if r.fiber != nil {
		r.fiber.write(w, r.opts)
	}
	if r.redis != nil {
		r.redis.write(w)
	}
	if r.redisMem != nil {
		r.redisMem.write(w)
	}
	if r.churn != nil {
		r.churn.write(w, r.opts)
	}
	if r.service != nil {
		r.service.write(w)
	}
	if r.ruleChurn != nil {
		r.ruleChurn.write(w)
	}
	if r.prop != nil {
		r.prop.write(w)
	}
	if r.rules != nil {
		r.rules.write(w)
	}
	if r.lease != nil {
		r.lease.write(w)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "report:", err)
	os.Exit(2)
}

// selectScenarios returns the in-memory scenarios selected by spec and
// whether the net/http, Fiber, Redis throughput, Redis memory, churn,
// service, rules-at-scale, rule churn, propagation and lease scenarios are.
func selectScenarios(spec string) (mem []membench.Scenario, mw, fiber, rd, rdMem, churn, service, rules, ruleChurn, prop, lease bool, err error) {
	all := membench.Scenarios()
	if spec == "all" || spec == "" {
		return all, true, true, true, true, true, true, true, true, true, true, nil
	}
	others := []struct {
		name string
		on   *bool
	}{{middlewareScenario, &mw}, {fiberScenario, &fiber}, {redisScenario, &rd}, {redisMemoryScenario, &rdMem}, {churnScenario, &churn}, {serviceScenario, &service}, {rulesScenario, &rules}, {ruleChurnScenario, &ruleChurn}, {propScenario, &prop}, {leaseScenario, &lease}}
	allNames := scenarioNames(all)
	for _, o := range others {
		allNames = append(allNames, o.name)
	}
	for _, tok := range strings.Split(spec, ",") {
		tok = strings.ToLower(strings.TrimSpace(tok))
		found := false
		for _, sc := range all {
			if strings.Contains(strings.ToLower(sc.Name), tok) {
				found = true
				if !slices.ContainsFunc(mem, func(s membench.Scenario) bool { return s.Name == sc.Name }) {
					mem = append(mem, sc)
				}
			}
		}
		for _, o := range others {
			if strings.Contains(strings.ToLower(o.name), tok) {
				found, *o.on = true, true
			}
		}
		if !found {
			return nil, false, false, false, false, false, false, false, false, false, false, fmt.Errorf("-scenarios: %q matches none of %s", tok, strings.Join(allNames, ", "))
		}
	}
	// Keep the report order whatever the order of the tokens.
	slices.SortStableFunc(mem, func(a, b membench.Scenario) int {
		return slices.IndexFunc(all, func(s membench.Scenario) bool { return s.Name == a.Name }) -
			slices.IndexFunc(all, func(s membench.Scenario) bool { return s.Name == b.Name })
	})
	return mem, mw, fiber, rd, rdMem, churn, service, rules, ruleChurn, prop, lease, nil
}

func scenarioNames(scs []membench.Scenario) []string {
	out := make([]string, len(scs))
	for i, sc := range scs {
		out[i] = sc.Name
	}
	return out
}

// implFilter is the -impls selection, shared by every section: a token
// selects the implementation of that name and its variants (name-...),
// case-insensitively.
type implFilter struct {
	all     bool
	curated bool // "default": all, less the rarely needed variants
	toks    []string
	used    map[string]bool
	seen    []string // every name offered, for the error message
}

func newImplFilter(spec string) (*implFilter, error) {
	f := &implFilter{used: map[string]bool{}}
	switch spec {
	case "all":
		f.all = true
		return f, nil
	case "default", "":
		f.all, f.curated = true, true
		return f, nil
	}
	for _, tok := range strings.Split(spec, ",") {
		if tok = strings.ToLower(strings.TrimSpace(tok)); tok != "" {
			f.toks = append(f.toks, tok)
		}
	}
	if len(f.toks) == 0 {
		return nil, fmt.Errorf("-impls: empty")
	}
	return f, nil
}

func (f *implFilter) match(name string) bool {
	f.seen = append(f.seen, name)
	if f.all {
		return true
	}
	ok, name := false, strings.ToLower(name)
	for _, tok := range f.toks {
		if name == tok || strings.HasPrefix(name, tok+"-") {
			f.used[tok], ok = true, true
		}
	}
	return ok
}

// unused reports the tokens that selected nothing in the selected scenarios.
func (f *implFilter) unused() error {
	for _, tok := range f.toks {
		if !f.used[tok] {
			slices.Sort(f.seen)
			return fmt.Errorf("-impls: %q matches no implementation of the selected scenarios (%s)", tok, strings.Join(slices.Compact(f.seen), ", "))
		}
	}
	return nil
}

func filterImpls[T any](f *implFilter, all []T, name func(T) string) []T {
	var out []T
	for _, im := range all {
		if f.match(name(im)) {
			out = append(out, im)
		}
	}
	return out
}
