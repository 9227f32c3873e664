package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/membench"
	"github.com/sluicehq/sluice/bench/redisbench"
	"github.com/sluicehq/sluice/bench/servicebench"
)

// environment describes the machine and the software of a run.
type environment struct {
	cpuModel    string
	cpus        int // logical CPUs
	cores       string
	memory      string
	kernel      string
	redisServer string // `redis-server --version`, or why not
	redisBench  string
	sluiceRev   string
	modules     []module
}

// module is one module linked into the report, from its build info.
type module struct {
	path, version, usedBy string
}

func readEnvironment() environment {
	e := environment{cpus: runtime.NumCPU()}
	info := cpuinfo()
	e.cpuModel = info["model name"]
	if e.cpuModel == "" {
		e.cpuModel = "unknown CPU"
	}
	if c := info["cpu cores"]; c != "" {
		e.cores = c + " core(s) per socket as /proc/cpuinfo reports them"
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				var kb int64
				if _, err := fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb); err == nil {
					e.memory = fmt.Sprintf("%.1f GiB RAM", float64(kb)/(1<<20))
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		e.kernel = "Linux " + strings.TrimSpace(string(b))
	}
	e.redisServer = toolVersion(redisbench.ServerEnv, "redis-server")
	e.redisBench = toolVersion(redisbench.BenchmarkEnv, "redis-benchmark")
	e.sluiceRev = gitRevision()
	e.modules = linkedModules()
	return e
}

// cpuinfo returns the fields of the first processor in /proc/cpuinfo.
func cpuinfo() map[string]string {
	out := map[string]string{}
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" && len(out) > 0 {
			break
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return out
}

// toolVersion runs `name --version` (or $env) and returns its first line.
func toolVersion(env, name string) string {
	bin, err := redisbench.FindBinary(env, name)
	if err != nil {
		return "not found"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return fmt.Sprintf("%s (version unknown: %v)", bin, err)
	}
	return strings.TrimSpace(firstLine(string(out)))
}

// gitRevision returns the commit of the sluice working tree, "+ local
// changes" if it differs from it, or "" outside a git checkout. Read-only
// git commands only.
func gitRevision() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rev, err := exec.CommandContext(ctx, "git", "-C", "..", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return ""
	}
	s := strings.TrimSpace(string(rev))
	st, err := exec.CommandContext(ctx, "git", "-C", "..", "status", "--porcelain", "--untracked-files=no").Output()
	if err == nil && len(strings.TrimSpace(string(st))) > 0 {
		s += " + local changes"
	}
	return s
}

// moduleUsers maps the modules the report names to what uses them.
func moduleUsers() map[string][]string {
	users := map[string][]string{}
	add := func(mod, who string) {
		if mod != "" && !slices.Contains(users[mod], who) {
			users[mod] = append(users[mod], who)
		}
	}
	for _, im := range membench.Impls() {
		add(im.Module, "in memory: "+im.Name)
	}
	for _, im := range httpImpls() {
		add(im.Module, "net/http: "+im.Name)
	}
	for _, im := range fiberImpls() {
		add(im.Module, "Fiber: "+im.Name)
	}
	for _, im := range redisbench.Impls() {
		if im.Kind == redisbench.Peer || im.Kind == redisbench.Yardstick {
			add(im.Module, "Redis: "+im.Name)
		}
	}
	add("github.com/sluicehq/sluice", "Redis: sluice-*")
	add("github.com/redis/go-redis/v9", "the client of every Redis implementation")
	add("github.com/valyala/fasthttp", "under Fiber")
	add("github.com/envoyproxy/go-control-plane/envoy", "service: the load generator's ShouldRateLimit client and the floor's server")
	add("google.golang.org/grpc", "service: the load generator's gRPC client and the grpc-go floor (cmd/grpcfloor)")
	return users
}

// linkedModules returns the version of every module moduleUsers names, from
// this binary's build info, sluice first.
func linkedModules() []module {
	users := moduleUsers()
	var out []module
	for path, who := range users {
		out = append(out, module{path: path, version: moduleVersion(path), usedBy: strings.Join(who, "; ")})
	}
	slices.SortFunc(out, func(a, b module) int {
		ai, bi := strings.HasPrefix(a.path, "github.com/sluicehq/"), strings.HasPrefix(b.path, "github.com/sluicehq/")
		switch {
		case ai && !bi:
			return -1
		case bi && !ai:
			return 1
		}
		return strings.Compare(a.path, b.path)
	})
	return out
}

// moduleVersion reports the version of module path linked into this binary,
// with its replacement if any.
func moduleVersion(path string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(no build info)"
	}
	for _, d := range bi.Deps {
		if d.Path != path {
			continue
		}
		if d.Replace != nil {
			if d.Replace.Version == "" || d.Replace.Version == "(devel)" {
				return "working tree (replace => " + d.Replace.Path + ")"
			}
			return fmt.Sprintf("%s => %s %s", d.Version, d.Replace.Path, d.Replace.Version)
		}
		return d.Version
	}
	return "(not linked)"
}

// loadAvg returns the 1-minute load average from /proc/loadavg, or "?".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "?"
}

func (r *report) writeMachine(w io.Writer) {
	e := r.env
	fmt.Fprintf(w, "\n## Machine and versions\n\n")
	fmt.Fprintf(w, "| | |\n|---|---|\n")
	fmt.Fprintf(w, "| CPU | %s, %d logical CPUs (GOMAXPROCS %d)%s |\n", e.cpuModel, e.cpus, runtime.GOMAXPROCS(0), prefixed("; ", e.cores))
	if e.memory != "" || e.kernel != "" {
		fmt.Fprintf(w, "| system | %s |\n", strings.Join(nonEmpty(e.kernel, e.memory, runtime.GOOS+"/"+runtime.GOARCH), ", "))
	}
	fmt.Fprintf(w, "| 1-minute load average | %s at the start, %s at the end (other jobs on this machine compete for its CPUs; each section gives its own) |\n", r.loadBefore, r.loadAfter)
	fmt.Fprintf(w, "| Go | %s |\n", runtime.Version())
	fmt.Fprintf(w, "| redis-server | %s |\n", e.redisServer)
	fmt.Fprintf(w, "| redis-benchmark | %s |\n", e.redisBench)
	if e.sluiceRev != "" {
		fmt.Fprintf(w, "| sluice commit | %s |\n", e.sluiceRev)
	}
	fmt.Fprintf(w, "\nModules, from the build info of the bench module (`bench/go.mod`):\n\n")
	fmt.Fprintf(w, "| module | version | measured as |\n|---|---|---|\n")
	for _, m := range e.modules {
		fmt.Fprintf(w, "| `%s` | %s | %s |\n", m.path, m.version, m.usedBy)
	}
}

func (r *report) writeCommands(w io.Writer) {
	o := r.opts
	fmt.Fprintf(w, "\n## Commands\n\n")
	fmt.Fprintf(w, "- this document and the chart: `make bench`, that is `cd bench && go run ./cmd/report -out ../docs` (about 8 minutes on 2 CPUs); this run was `cd bench && go run ./cmd/report %s`", strings.Join(o.args, " "))
	if len(o.quickDefaults) > 0 {
		fmt.Fprintf(w, " (-quick set %s)", strings.Join(o.quickDefaults, ", "))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "- a quick look (about 2 minutes, figures not to quote): `make bench BENCHFLAGS=-quick`, or `cd bench && go run ./cmd/report -quick` for stdout\n")
	fmt.Fprintf(w, "- one area or some implementations: `go run ./cmd/report -scenarios redis -impls sluice-token_bucket,ulule,redis_rate,throttled,redis-benchmark`; all flags: `go run ./cmd/report -h`\n")
	fmt.Fprintf(w, "- the same scenarios as `go test` benchmarks, from `bench/`: `go test -run XXX -bench 'HotKey|Keys100k|Middleware' -benchtime 400ms .`, `go test -run XXX -bench HeapPerKey -benchtime 1x .`, `go test -run XXX -bench Redis64Callers -benchtime 100000x .`, `go test -run XXX -bench RedisMemoryPerKey -benchtime 1x .`\n")
	fmt.Fprintf(w, "- the Redis server: `redis-server --port PORT --bind 127.0.0.1 --save \"\" --appendonly no` on a free loopback port, started and killed by the report\n")
	fmt.Fprintf(w, "- the ceiling: `redis-benchmark -h 127.0.0.1 -p PORT -c %d -n %d -r %d -q [-P 16] EVALSHA <sha> 1 user:__rand_int__`, the script being `redisbench.RawScript` (GET, SET PX, five integers back)\n",
		o.callers, o.ceilingN, redisbench.Identities)
	fmt.Fprintf(w, "- **the service section alone** (ratelimitd, envoyproxy/ratelimit's default and best configurations, the grpc-go floor; about 2.5 minutes): `cd bench && go run ./cmd/report -scenarios service` (stdout; add `-quick` for about a minute, figures not to quote); ratelimitd is built from `../service` and the floor from `./cmd/grpcfloor`, envoyproxy/ratelimit installed with `go install %s@%s` into the cache directory on first use; the variants that chose envoyproxy/ratelimit's best configuration: `go run ./cmd/report -scenarios service -impls envoy-ratelimit-best,envoy-ratelimit-tune`; as a go test benchmark `go test -run XXX -bench Service -benchtime 50000x .`\n",
		servicebench.EnvoyRatelimitPackage, servicebench.EnvoyRatelimitVersion)
	fmt.Fprintf(w, "- ratelimitd under rule churn: `go run ./cmd/report -scenarios rulechurn`; as a go test benchmark `go test -run XXX -bench ServiceRuleChurn -benchtime 150000x .`\n")
	fmt.Fprintf(w, "- propagation between two ratelimitd instances on PostgreSQL: `go run ./cmd/report -scenarios propagation [-propchanges 100]` (PostgreSQL from Debian's packages, as `make deps` installs it); as a bounded test `go test -run TestPropagation -v ./propbench`\n")
	fmt.Fprintf(w, "- ratelimitd's rules at scale: `go run ./cmd/report -scenarios rules`; as go test benchmarks `cd service && go test -run XXX -bench Scale -benchmem ./engine ./rulesdb`\n")
	fmt.Fprintf(w, "- settings of this run: in memory and middleware %d runs of %s each (heap: %d runs of %d keys); Redis %d runs of %s after %s of warm-up, %d callers; redis-benchmark -n %d; Redis memory %d identities; service %d rounds of %s after %s of warm-up (open loop %s at %.0f calls/s), %d gRPC connections; rule churn %d runs per variant; propagation %d changes (and %d with %d rules stored); rules at scale %d runs of %s\n",
		o.count, o.benchtime, o.heapCount, o.heapKeys, o.redisCount, o.redisTime, o.redisWarm, o.callers, o.ceilingN, o.redisKeys, o.serviceCount, o.serviceTime, o.serviceWarm, o.serviceOpenTime, o.serviceOpenRate, o.serviceConns, o.churnServiceCount, o.propChanges, o.propBigChanges, o.propBigRules, o.rulesCount, o.rulesTime)
}

func prefixed(p, s string) string {
	if s == "" {
		return ""
	}
	return p + s
}

func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
