package redisbench

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// LoadConfig is one closed-loop load: Callers goroutines, each taking one
// decision after the other, walking Keys from its own offset.
type LoadConfig struct {
	Callers int
	Keys    []string
	// Duration stops the callers once it has passed: a caller issues no new
	// decision after it (the ones in flight complete and count).
	Duration time.Duration
	// N, if positive, is the total number of decisions (the go test mode).
	N int64
}

// LoadResult is what a load measured.
type LoadResult struct {
	Decisions int64
	Elapsed   time.Duration // from the start until the last caller finished
	Denied    int64
	Errors    int64
	FirstErr  error
	Latency   Histogram // of every decision, as its caller saw it
}

// PerSecond is the throughput: decisions per second of elapsed time.
func (r *LoadResult) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Decisions) / r.Elapsed.Seconds()
}

type caller struct {
	hist                      Histogram
	decisions, denied, errors int64
	err                       error
}

// Load runs cfg against d. Per decision it costs the harness one
// time.Now and one histogram update, no allocation.
func Load(ctx context.Context, d Decider, cfg LoadConfig) *LoadResult {
	callers := make([]*caller, cfg.Callers)
	var issued atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(cfg.Duration)
	for g := range callers {
		c := new(caller)
		callers[g] = c
		wg.Add(1)
		go func() {
			defer wg.Done()
			keys := cfg.Keys
			i := g * len(keys) / cfg.Callers
			t0 := time.Now()
			for {
				if cfg.N > 0 {
					if issued.Add(1) > cfg.N {
						return
					}
				} else if !t0.Before(end) {
					return
				}
				ok, err := d.Decide(ctx, keys[i])
				t1 := time.Now()
				c.hist.Record(t1.Sub(t0))
				c.decisions++
				switch {
				case err != nil:
					if c.errors++; c.err == nil {
						c.err = err
					}
				case !ok:
					c.denied++
				}
				t0 = t1
				if i++; i == len(keys) {
					i = 0
				}
			}
		}()
	}
	wg.Wait()
	r := &LoadResult{Elapsed: time.Since(start)}
	for _, c := range callers {
		r.Decisions += c.decisions
		r.Denied += c.denied
		r.Errors += c.errors
		if r.FirstErr == nil {
			r.FirstErr = c.err
		}
		r.Latency.Merge(&c.hist)
	}
	return r
}

// Sample is one measured run of one implementation.
type Sample struct {
	Decisions  int64
	Elapsed    time.Duration
	PerSec     float64
	P50, P99   time.Duration
	P999, Max  time.Duration
	HasLatency bool // redis-benchmark -q reports only its p50
	Denied     int64
	Errors     int64
	// ClientCPU is the CPU time of the client during the run: this Go
	// process, or the redis-benchmark process.
	ClientCPU time.Duration
	// ServerCPU is the CPU time of redis-server's main thread.
	ServerCPU time.Duration
	// ScriptCalls and ScriptTime: EVAL/EVALSHA/FCALL calls and the time the
	// server spent executing them (INFO commandstats).
	ScriptCalls int64
	ScriptTime  time.Duration
	// Commands and RoundTrips the go-redis client sent: a pipeline is one
	// round trip.
	Commands, RoundTrips int64
	// Allocs and Bytes allocated by the Go process during the run.
	Allocs, Bytes uint64
	// Conns is the number of connections the client opened.
	Conns int
}

// RunConfig tunes Run.
type RunConfig struct {
	Callers int
	Keys    []string
	// Quota is the implementations' limit (zero: ThroughputQuota).
	Quota    Quota
	Warmup   time.Duration // untimed load before the measured one (0: Callers*16 decisions)
	Duration time.Duration // measured load, duration mode
	N        int64         // measured load, count mode (go test's b.N)
	// Start and Stop, if set, are called right before and after the
	// measured load (a benchmark's ResetTimer and StopTimer).
	Start, Stop func()
}

// Run measures impl (not a Ceiling) on srv: it empties the database, makes a
// fresh client and implementation, warms them up (pool filled, scripts
// loaded), then runs the measured load and collects the statistics of both
// sides. A run in which any decision failed or was denied returns an error
// with the Sample.
func Run(ctx context.Context, admin *redis.Client, addr string, impl Impl, cfg RunConfig) (Sample, error) {
	if impl.Kind == Ceiling {
		return Sample{}, fmt.Errorf("%s: use RunCeiling", impl.Name)
	}
	if err := admin.FlushAll(ctx).Err(); err != nil {
		return Sample{}, fmt.Errorf("FLUSHALL: %w", err)
	}
	client := NewClient(addr, cfg.Callers)
	defer client.Close()
	var rt roundTrips
	client.AddHook(&rt)
	q := cfg.Quota
	if q == (Quota{}) {
		q = ThroughputQuota
	}
	d, err := impl.New(client, q)
	if err != nil {
		return Sample{}, fmt.Errorf("%s: new: %w", impl.Name, err)
	}
	warm := LoadConfig{Callers: cfg.Callers, Keys: cfg.Keys, Duration: cfg.Warmup}
	if cfg.Warmup <= 0 {
		warm.N = int64(cfg.Callers * 16)
	}
	if w := Load(ctx, d, warm); w.Errors > 0 {
		return Sample{}, fmt.Errorf("%s: warm-up: %d errors, first: %w", impl.Name, w.Errors, w.FirstErr)
	}
	s, lr, err := measure(ctx, admin, client, &rt, d, cfg)
	if err != nil {
		return Sample{}, err
	}
	switch {
	case lr.Errors > 0:
		return s, fmt.Errorf("%s: %d of %d decisions failed, first: %w", impl.Name, lr.Errors, lr.Decisions, lr.FirstErr)
	case lr.Denied > 0:
		return s, fmt.Errorf("%s: %d of %d decisions denied: the limit is too low for this load", impl.Name, lr.Denied, lr.Decisions)
	}
	return s, nil
}

// measure runs cfg's measured load of d on client (whose commands and
// round trips rt counts) and the statistics of both sides around it: the
// server's, read through admin, and this process's CPU and allocations.
func measure(ctx context.Context, admin, client *redis.Client, rt *roundTrips, d Decider, cfg RunConfig) (Sample, *LoadResult, error) {
	runtime.GC()
	before, err := serverStats(ctx, admin)
	if err != nil {
		return Sample{}, nil, err
	}
	rt.reset()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpu0 := processCPU()
	if cfg.Start != nil {
		cfg.Start()
	}
	lr := Load(ctx, d, LoadConfig{Callers: cfg.Callers, Keys: cfg.Keys, Duration: cfg.Duration, N: cfg.N})
	if cfg.Stop != nil {
		cfg.Stop()
	}
	cpu1 := processCPU()
	runtime.ReadMemStats(&ms1)
	after, err := serverStats(ctx, admin)
	if err != nil {
		return Sample{}, nil, err
	}
	return Sample{
		Decisions: lr.Decisions, Elapsed: lr.Elapsed, PerSec: lr.PerSecond(),
		P50: lr.Latency.Quantile(0.50), P99: lr.Latency.Quantile(0.99), P999: lr.Latency.Quantile(0.999), Max: lr.Latency.Max(),
		HasLatency: true, Denied: lr.Denied, Errors: lr.Errors,
		ClientCPU: cpu1 - cpu0, ServerCPU: after.cpu - before.cpu,
		ScriptCalls: after.scriptCalls - before.scriptCalls, ScriptTime: after.scriptTime - before.scriptTime,
		Commands: rt.cmds.Load(), RoundTrips: rt.trips.Load(),
		Allocs: ms1.Mallocs - ms0.Mallocs, Bytes: ms1.TotalAlloc - ms0.TotalAlloc,
		Conns: int(client.PoolStats().TotalConns),
	}, lr, nil
}

// roundTrips is a go-redis hook counting commands and round trips.
type roundTrips struct{ cmds, trips atomic.Int64 }

func (r *roundTrips) reset() { r.cmds.Store(0); r.trips.Store(0) }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.cmds.Add(1)
		r.trips.Add(1)
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.cmds.Add(int64(len(cmds)))
		r.trips.Add(1)
		return next(ctx, cmds)
	}
}

type stats struct {
	cpu         time.Duration
	scriptCalls int64
	scriptTime  time.Duration
}

// serverStats reads redis-server's main-thread CPU time and its script
// counters (INFO cpu, INFO commandstats).
func serverStats(ctx context.Context, admin *redis.Client) (stats, error) {
	info, err := admin.Info(ctx, "cpu", "commandstats").Result()
	if err != nil {
		return stats{}, fmt.Errorf("INFO: %w", err)
	}
	var s stats
	var total time.Duration
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch k {
		case "used_cpu_sys_main_thread", "used_cpu_user_main_thread":
			f, _ := strconv.ParseFloat(v, 64)
			s.cpu += time.Duration(f * 1e9)
		case "used_cpu_sys", "used_cpu_user":
			f, _ := strconv.ParseFloat(v, 64)
			total += time.Duration(f * 1e9)
		case "cmdstat_evalsha", "cmdstat_eval", "cmdstat_fcall":
			// calls=N,usec=N,usec_per_call=...
			for _, kv := range strings.Split(v, ",") {
				name, val, _ := strings.Cut(kv, "=")
				n, _ := strconv.ParseInt(val, 10, 64)
				switch name {
				case "calls":
					s.scriptCalls += n
				case "usec":
					s.scriptTime += time.Duration(n) * time.Microsecond
				}
			}
		}
	}
	if s.cpu == 0 { // before Redis 6.2: the whole process
		s.cpu = total
	}
	return s, nil
}
