package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/lua"
)

// What a decision costs Redis, per algorithm and path, next to
// envoyproxy/ratelimit's fixed window on the same server: per descriptor,
// INCRBY of the window's key and EXPIRE of it, pipelined
// (src/redis/fixed_cache_impl.go), so a descriptor costs two command
// dispatches. Each case is measured in chunks interleaved with its
// envoyproxy/ratelimit counterpart, which makes as many decisions per
// round trip (one, three, or 64 descriptors in one pipeline), so both see
// the same machine at the same time; a chunk reads INFO cpu and
// commandstats before and after. Reported, per decision (one op, or one
// descriptor), the median over chunks:
//
//   - redis-cpu-us/decision: used_cpu_user + used_cpu_sys, the server's
//     whole CPU (reading the socket, parsing, running, replying);
//   - cmd-us/decision: the usec of the commands the client sent (FCALL or
//     EVALSHA, the redis.call()s they make included; INCRBY plus EXPIRE);
//   - envoy-cpu-us/decision and envoy-cmd-us/decision: the same for the
//     counterpart, and x-envoy-cpu and x-envoy-cmd the ratios (the median
//     of each chunk's against the counterpart's chunk next to it);
//   - redis.calls/decision: the commands the script ran.
//
// The script is called with the store's own arguments (opKeys, args, the
// limit compiled) on the instant "-1" (Redis TIME), one round trip after
// the other. A "hot" case spreads its rounds over 1000 identities whose
// keys exist; "fresh" takes a new identity each round; "denied" finds
// its identity drained (and already Throttled); "override" decides under
// an override (a raise) in force; group3 decides three policies of one
// identity in one call, many64 64 identities in one decideMany call, and
// pipeline64 64 decide1 calls in one pipeline (as a Cluster node gets
// them). The ns/op is per chunk.
//
//	go test ./core/redisstore -run XXX -bench RedisCost -benchtime 15x
//
// Times on a shared machine move with its load; with SLUICE_REDIS_CALLGRIND=1
// the server runs under valgrind's callgrind (slowly) and each chunk also
// reports the instructions the server ran (redis-instr/decision,
// x-envoy-instr), which do not (SLUICE_REDIS_CALLGRIND_DIR keeps the
// server's profiles there, for callgrind_annotate):
//
//	SLUICE_REDIS_CALLGRIND=1 go test ./core/redisstore -run XXX -bench RedisCost -benchtime 3x
func BenchmarkRedisCost(b *testing.B) {
	ctx := context.Background()
	cg := startCallgrind(b)
	srv := redistest.StartServer(b)
	client := srv.Client(b)
	if cg != nil {
		cg.attach(b, client)
	}
	costCallgrind = cg
	s, err := New(client, WithPipelining(0, 0), WithTimeout(5*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.r.load(ctx, s.r.loads.Load()); err != nil {
		b.Fatal(err)
	}
	if err := client.ScriptLoad(ctx, lua.Decide1()).Err(); err != nil {
		b.Fatal(err)
	}
	en := envoyCases(client)
	for _, a := range []core.Algorithm{core.FixedWindow, core.SlidingWindowCounter, core.TokenBucket, core.LeakyBucket, core.GCRA, core.SlidingWindowLog} {
		for _, c := range sluiceCases(s, a) {
			b.Run(algoCode[a]+"/"+c.name, func(b *testing.B) { runCost(b, client, c, en.like(c)) })
		}
	}
}

// costCase is one path measured: per decisions in each of the rounds of
// a chunk (one round trip each), the commands sent (as commandstats names
// them), setup run once on the case's identities (named by prefix), and
// round, the i-th round trip.
type costCase struct {
	name   string
	per    int
	rounds int
	sent   []string
	setup  func(ctx context.Context, prefix string) error
	round  func(ctx context.Context, prefix string, i int) error
}

// hotIDs is the number of identities a hot case spreads its rounds over.
const hotIDs = 1000

func hotID(prefix string, i int) string { return prefix + ":" + strconv.Itoa(i%hotIDs) }

// sample is one chunk's cost per decision: CPU and command µs, the
// commands run by scripts, and the instructions the server ran (0 unless
// under callgrind).
type sample struct{ cpu, cmd, calls, instr float64 }

// costCallgrind is the callgrind the server of BenchmarkRedisCost runs
// under, or nil.
var costCallgrind *callgrind

// callgrind counts the instructions of a redis-server run under valgrind.
type callgrind struct {
	dir string
	pid string
}

// startCallgrind makes the servers the benchmark starts run under
// callgrind when SLUICE_REDIS_CALLGRIND=1 (through REDIS_SERVER, a wrapper
// written in a temporary directory), and returns nil otherwise.
func startCallgrind(b *testing.B) *callgrind {
	if os.Getenv("SLUICE_REDIS_CALLGRIND") != "1" {
		return nil
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		b.Fatal(err)
	}
	dir := os.Getenv("SLUICE_REDIS_CALLGRIND_DIR") // to keep the profiles, for callgrind_annotate
	if dir == "" {
		dir = b.TempDir()
	}
	wrapper := filepath.Join(dir, "redis-server")
	script := "#!/bin/sh\nexec valgrind -q --tool=callgrind --callgrind-out-file=" + dir + "/cg.%p " + bin + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		b.Fatal(err)
	}
	b.Setenv(redistest.BinaryEnv, wrapper)
	return &callgrind{dir: dir}
}

// attach finds the server's process (valgrind runs it in its own).
func (cg *callgrind) attach(b *testing.B, client *redis.Client) {
	info, err := client.Info(context.Background(), "server").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			cg.pid = v
		}
	}
	if cg.pid == "" {
		b.Fatal("no process_id in INFO")
	}
}

// zero starts a count; total returns the instructions since.
func (cg *callgrind) zero() error {
	return exec.Command("callgrind_control", "-z", cg.pid).Run()
}

func (cg *callgrind) total() (float64, error) {
	if err := exec.Command("callgrind_control", "-d", cg.pid).Run(); err != nil {
		return 0, err
	}
	dumps, err := filepath.Glob(filepath.Join(cg.dir, "cg."+cg.pid+".*"))
	if err != nil || len(dumps) == 0 {
		return 0, fmt.Errorf("no callgrind dump in %s: %v", cg.dir, err)
	}
	last := slices.MaxFunc(dumps, func(a, b string) int {
		na, _ := strconv.Atoi(a[strings.LastIndexByte(a, '.')+1:])
		nb, _ := strconv.Atoi(b[strings.LastIndexByte(b, '.')+1:])
		return na - nb
	})
	data, err := os.ReadFile(last)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "summary: "); ok {
			return strconv.ParseFloat(strings.Fields(v)[0], 64)
		}
	}
	return 0, fmt.Errorf("no summary in %s", last)
}

func runCost(b *testing.B, client *redis.Client, c, en costCase) {
	ctx := context.Background()
	if err := client.FlushAll(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	cs, es := fmt.Sprintf("s%x", rand.Uint64()), fmt.Sprintf("e%x", rand.Uint64())
	for _, x := range []struct {
		c      costCase
		prefix string
	}{{c, cs}, {en, es}} {
		if x.c.setup != nil {
			if err := x.c.setup(ctx, x.prefix); err != nil {
				b.Fatal(err)
			}
		}
	}
	var mine, theirs []sample
	b.ResetTimer()
	for i := range b.N {
		m, err := measure(ctx, client, c, cs, i)
		if err != nil {
			b.Fatal(err)
		}
		t, err := measure(ctx, client, en, es, i)
		if err != nil {
			b.Fatal(err)
		}
		mine, theirs = append(mine, m), append(theirs, t)
	}
	b.StopTimer()
	pick := func(ss []sample, f func(sample) float64) []float64 {
		out := make([]float64, len(ss))
		for i, s := range ss {
			out[i] = f(s)
		}
		return out
	}
	ratio := func(f func(sample) float64) []float64 {
		out := make([]float64, len(mine))
		for i := range mine {
			out[i] = f(mine[i]) / f(theirs[i])
		}
		return out
	}
	cpu, cmd := func(s sample) float64 { return s.cpu }, func(s sample) float64 { return s.cmd }
	b.ReportMetric(median(pick(mine, cpu)), "redis-cpu-us/decision")
	b.ReportMetric(median(pick(mine, cmd)), "cmd-us/decision")
	b.ReportMetric(median(pick(theirs, cpu)), "envoy-cpu-us/decision")
	b.ReportMetric(median(pick(theirs, cmd)), "envoy-cmd-us/decision")
	b.ReportMetric(median(ratio(cpu)), "x-envoy-cpu")
	b.ReportMetric(median(ratio(cmd)), "x-envoy-cmd")
	b.ReportMetric(median(pick(mine, func(s sample) float64 { return s.calls })), "redis.calls/decision")
	if costCallgrind != nil {
		instr := func(s sample) float64 { return s.instr }
		b.ReportMetric(median(pick(mine, instr)), "redis-instr/decision")
		b.ReportMetric(median(pick(theirs, instr)), "envoy-instr/decision")
		b.ReportMetric(median(ratio(instr)), "x-envoy-instr")
	}
}

func median(v []float64) float64 {
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// measure runs chunk i of c (its rounds) and returns its cost per decision.
func measure(ctx context.Context, client *redis.Client, c costCase, prefix string, i int) (sample, error) {
	before, err := readStats(ctx, client)
	if err != nil {
		return sample{}, err
	}
	cg := costCallgrind
	if cg != nil {
		if err := cg.zero(); err != nil {
			return sample{}, err
		}
	}
	for r := range c.rounds {
		if err := c.round(ctx, prefix, i*c.rounds+r); err != nil {
			return sample{}, err
		}
	}
	n := float64(c.rounds * c.per)
	var sm sample
	if cg != nil {
		instr, err := cg.total()
		if err != nil {
			return sample{}, err
		}
		sm.instr = instr / n
	}
	after, err := readStats(ctx, client)
	if err != nil {
		return sample{}, err
	}
	sm.cpu = (after.cpu - before.cpu) / n
	for name, st := range after.cmds {
		d := st.calls - before.cmds[name].calls
		switch {
		case slices.Contains(c.sent, name):
			sm.cmd += (st.usec - before.cmds[name].usec) / n
		case name != "info":
			sm.calls += d / n
		}
	}
	return sm, nil
}

type cmdStat struct{ calls, usec float64 }

type redisStats struct {
	cpu  float64 // µs
	cmds map[string]cmdStat
}

// readStats reads INFO cpu and commandstats.
func readStats(ctx context.Context, client *redis.Client) (redisStats, error) {
	info, err := client.Info(ctx, "cpu", "commandstats").Result()
	if err != nil {
		return redisStats{}, err
	}
	st := redisStats{cmds: map[string]cmdStat{}}
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case k == "used_cpu_user" || k == "used_cpu_sys":
			f, _ := strconv.ParseFloat(v, 64)
			st.cpu += f * 1e6
		case strings.HasPrefix(k, "cmdstat_"):
			var cs cmdStat
			for _, kv := range strings.Split(v, ",") {
				name, val, _ := strings.Cut(kv, "=")
				f, _ := strconv.ParseFloat(val, 64)
				switch name {
				case "calls":
					cs.calls = f
				case "usec":
					cs.usec = f
				}
			}
			st.cmds[strings.TrimPrefix(k, "cmdstat_")] = cs
		}
	}
	return st, nil
}

// Round trips per chunk: of one decision each, and of several.
const (
	roundsOne  = 400
	roundsMany = 8
)

// sluiceCases returns the paths of the store's scripts for algorithm a.
func sluiceCases(s *Store, a core.Algorithm) []costCase {
	roomy := core.Per(30_000, time.Hour).WithAlgorithm(a)
	one := core.Per(1, time.Hour).WithAlgorithm(a)
	raise := core.Per(60_000, time.Hour).WithAlgorithm(a)
	fcall := []string{"fcall"}
	decide1 := func(key core.Key, l core.Limit, want int64) func(context.Context) error {
		return func(ctx context.Context) error {
			cp, err := s.compile(l)
			if err != nil {
				return err
			}
			argv := append([]any{"fcall", s.r.lib.Decide1, keysPerOp}, s.opKeys(nil, key, l.Algorithm)...)
			argv = append(argv, s.now(), cp.boxed, 1)
			return expect(s.client.Do(ctx, argv...), want, 1)
		}
	}
	take := func(l core.Limit, want int64) func(context.Context, string, int) error {
		return func(ctx context.Context, prefix string, i int) error {
			return decide1(core.Key{Identity: hotID(prefix, i)}, l, want)(ctx)
		}
	}
	each := func(f func(ctx context.Context, k core.Key) error) func(context.Context, string) error {
		return func(ctx context.Context, prefix string) error {
			for i := range hotIDs {
				if err := f(ctx, core.Key{Identity: hotID(prefix, i)}); err != nil {
					return err
				}
			}
			return nil
		}
	}
	warm := each(func(ctx context.Context, k core.Key) error {
		for _, p := range []string{"", "a", "b", "c"} { // decide1's key, group3's
			if err := decide1(core.Key{Identity: k.Identity, Policy: p}, roomy, 1)(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	drain := each(func(ctx context.Context, k core.Key) error {
		if err := decide1(k, one, 1)(ctx); err != nil {
			return err
		}
		return decide1(k, one, 0)(ctx) // Throttled from now on
	})
	override := each(func(ctx context.Context, k core.Key) error {
		if err := s.SetOverride(ctx, k, core.Override{Limit: raise, Until: time.Now().Add(time.Hour)}); err != nil {
			return err
		}
		return decide1(k, roomy, 1)(ctx)
	})
	cases := []costCase{
		{name: "decide1/fresh", per: 1, rounds: roundsOne, sent: fcall, round: func(ctx context.Context, prefix string, i int) error {
			return decide1(core.Key{Identity: prefix + ":f" + strconv.Itoa(i)}, roomy, 1)(ctx)
		}},
		{name: "decide1/hot", per: 1, rounds: roundsOne, sent: fcall, setup: warm, round: take(roomy, 1)},
		{name: "decide1/denied", per: 1, rounds: roundsOne, sent: fcall, setup: drain, round: take(one, 0)},
		{name: "decide1/override", per: 1, rounds: roundsOne, sent: fcall, setup: override, round: take(roomy, 1)},
		{name: "group3/hot", per: 3, rounds: roundsOne, sent: fcall, setup: warm, round: group3(s, roomy)},
		{name: "many64/hot", per: 64, rounds: roundsMany, sent: fcall, setup: warm, round: many64(s, roomy)},
		{name: "pipeline64/hot", per: 64, rounds: roundsMany, sent: fcall, setup: warm, round: pipeline64(s, roomy)},
	}
	if a == core.FixedWindow || a == core.SlidingWindowCounter {
		cases = append(cases, costCase{name: "evalsha/hot", per: 1, rounds: roundsOne, sent: []string{"evalsha"}, setup: warm, round: func(ctx context.Context, prefix string, i int) error {
			cp, _ := s.compile(roomy)
			argv := append([]any{"evalsha", s.r.decide1.sha, keysPerOp}, s.opKeys(nil, core.Key{Identity: hotID(prefix, i)}, a)...)
			return expect(s.client.Do(ctx, append(argv, s.now(), cp.boxed, 1)...), 1, 1)
		}})
	}
	return cases
}

// group3 decides three policies of one hot identity in one decide call.
func group3(s *Store, l core.Limit) func(context.Context, string, int) error {
	cp, _ := s.compile(l)
	cps := []*compiled{cp, cp, cp}
	return func(ctx context.Context, prefix string, i int) error {
		id := hotID(prefix, i)
		ops := []core.Op{{Key: core.Key{Identity: id, Policy: "a"}, Limit: l, Cost: 1}, {Key: core.Key{Identity: id, Policy: "b"}, Limit: l, Cost: 1}, {Key: core.Key{Identity: id, Policy: "c"}, Limit: l, Cost: 1}}
		argv := []any{"fcall", s.r.lib.Decide, keysPerOp * 3}
		for _, op := range ops {
			argv = s.opKeys(argv, op.Key, l.Algorithm)
		}
		return expect(s.client.Do(ctx, s.args(argv, s.now(), cps, ops)...), 1, 3)
	}
}

// many64 decides 64 hot identities, each as decide1, in one decideMany call.
func many64(s *Store, l core.Limit) func(context.Context, string, int) error {
	cp, _ := s.compile(l)
	return func(ctx context.Context, prefix string, i int) error {
		argv := []any{"fcall", s.r.lib.DecideMany, manyKeysPerOp * 64}
		for j := range 64 {
			argv = s.opKeys(argv, core.Key{Identity: hotID(prefix, i*64+j)}, l.Algorithm)[:len(argv)+manyKeysPerOp]
		}
		argv = append(argv, s.now(), 0, cp.boxed, 1) // one limit and one cost for all, as the store sends them
		res, err := s.client.Do(ctx, argv...).Int64Slice()
		if err != nil {
			return err
		}
		if len(res) != 1+64*shortLen || res[1+shortFlags]&1 != 1 {
			return fmt.Errorf("unexpected reply %v", res)
		}
		return nil
	}
}

// pipeline64 sends 64 decide1 calls of hot identities in one pipeline.
func pipeline64(s *Store, l core.Limit) func(context.Context, string, int) error {
	cp, _ := s.compile(l)
	return func(ctx context.Context, prefix string, i int) error {
		cmds := make([]*redis.Cmd, 64)
		_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for j := range cmds {
				argv := append([]any{"fcall", s.r.lib.Decide1, keysPerOp}, s.opKeys(nil, core.Key{Identity: hotID(prefix, i*64+j)}, l.Algorithm)...)
				cmds[j] = p.Do(ctx, append(argv, s.now(), cp.boxed, 1)...)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, c := range cmds {
			if err := expect(c, 1, 1); err != nil {
				return err
			}
		}
		return nil
	}
}

// expect checks that a reply of n ops starts with allowed = want.
func expect(cmd *redis.Cmd, want int64, n int) error {
	res, err := cmd.Int64Slice()
	if err != nil {
		return err
	}
	if n == 1 { // decide1's short reply
		if len(res) == 0 || len(res) != shortLenOf(res[shortFlags]) || res[shortFlags]&1 != want {
			return fmt.Errorf("unexpected reply %v, want allowed %d", res, want)
		}
		return nil
	}
	if len(res) < n*outcomeLen || res[0] != want {
		return fmt.Errorf("unexpected reply %v, want allowed %d", res, want)
	}
	return nil
}

// envoy is envoyproxy/ratelimit's fixed window on the same server: per
// descriptor, INCRBY of the window's key and EXPIRE of it, pipelined, the
// descriptors of one request in one pipeline.
type envoy struct{ client *redis.Client }

func envoyCases(client *redis.Client) envoy { return envoy{client} }

// like returns the counterpart of c: as many descriptors per round trip
// as c makes decisions, on fresh keys if c's are.
func (e envoy) like(c costCase) costCase {
	fresh := strings.HasSuffix(c.name, "/fresh")
	en := costCase{name: "envoy", per: c.per, rounds: c.rounds, sent: []string{"incrby", "expire"}}
	en.round = func(ctx context.Context, prefix string, i int) error {
		keys := make([]string, c.per)
		for j := range keys {
			if fresh {
				keys[j] = e.key(prefix, "f"+strconv.Itoa(i*c.per+j))
			} else {
				keys[j] = e.key(prefix, hotID("", i*c.per+j))
			}
		}
		return e.pairs(ctx, keys...)
	}
	if !fresh {
		en.setup = func(ctx context.Context, prefix string) error {
			for i := range hotIDs {
				if err := e.pairs(ctx, e.key(prefix, hotID("", i))); err != nil {
					return err
				}
			}
			return nil
		}
	}
	return en
}

// key is envoyproxy/ratelimit's key of a descriptor in an hourly window.
func (e envoy) key(prefix, id string) string {
	w := time.Now().Unix() / 3600 * 3600
	return prefix + "_" + id + "_" + strconv.FormatInt(w, 10)
}

// pairs sends INCRBY and EXPIRE of each key in one pipeline.
func (e envoy) pairs(ctx context.Context, keys ...string) error {
	cmds, err := e.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			p.IncrBy(ctx, k, 1)
			p.Expire(ctx, k, time.Hour)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(cmds) != 2*len(keys) {
		return fmt.Errorf("%d replies", len(cmds))
	}
	return nil
}
