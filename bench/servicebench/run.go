package servicebench

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/sluicehq/sluice/bench/redisbench"
)

// Target is one server under load.
type Target struct {
	// Name is the implementation's name in the report.
	Name string
	// Server is the process whose CPU time is measured (nil: none, the
	// load generator decides itself).
	Server *Process
	// Redis is the redis-server the server decides on, nil for ratelimitd's
	// memory store: it is emptied (FLUSHALL) before each run and its CPU
	// time measured.
	Redis *redisbench.Server
	// Decider takes one call of the load: one check, or a batch.
	Decider redisbench.Decider
	// ChecksPerCall is 1, or the batch size of a batch call.
	ChecksPerCall int
}

// RunConfig is one measured run.
type RunConfig struct {
	Callers  int
	Users    []string
	Warmup   time.Duration // unmeasured load first (0: Callers*16 calls)
	Duration time.Duration // measured load, duration mode
	N        int64         // measured load, count mode (go test's b.N calls)
	// Start and Stop, if set, are called right before and after the
	// measured load (a benchmark's ResetTimer and StopTimer).
	Start, Stop func()
	// Profile takes a CPU profile of the server during the measured load
	// (duration mode; the server must have a PprofAddr): whole seconds from
	// its start, at least one, at most the load's duration rounded down.
	Profile bool
}

// Sample is what one run measured.
type Sample struct {
	Calls, Checks int64
	Elapsed       time.Duration
	// PerSec is checks per second of elapsed time.
	PerSec float64
	// Latency of one call as its caller saw it.
	P50, P99, P999, Max time.Duration
	Denied, Errors      int64
	// ServerCPU, RedisCPU and LoadCPU are the CPU times of the server
	// process, of redis-server (0 without one) and of this process (the
	// load generator) over the measured interval.
	ServerCPU, RedisCPU, LoadCPU time.Duration
	// Profile is where the server's CPU time went, if RunConfig.Profile
	// asked for it and it could be taken; ProfileErr says why not.
	Profile    *Breakdown
	ProfileErr error
	// ProfileData is the profile itself (pprof's format, for go tool pprof).
	ProfileData []byte
}

// PerCheck returns d per check, in microseconds.
func (s Sample) PerCheck(d time.Duration) float64 {
	if s.Checks == 0 {
		return 0
	}
	return float64(d) / 1e3 / float64(s.Checks)
}

// Run measures t: it empties t.Redis, warms up, then runs cfg.Callers callers
// for cfg.Duration and reads the CPU times of the three processes before and
// after. A run in which a call failed or a check was denied returns an error
// with the Sample.
func Run(ctx context.Context, t Target, cfg RunConfig) (Sample, error) {
	if t.Server != nil {
		if exited, err := t.Server.Exited(); exited {
			return Sample{}, fmt.Errorf("%s: %s has exited (%v):\n%s", t.Name, t.Server.Name, err, t.Server.Output())
		}
	}
	if t.Redis != nil {
		if err := t.Redis.Admin().FlushAll(ctx).Err(); err != nil {
			return Sample{}, fmt.Errorf("FLUSHALL: %w", err)
		}
	}
	warm := redisbench.LoadConfig{Callers: cfg.Callers, Keys: cfg.Users, Duration: cfg.Warmup}
	if cfg.Warmup <= 0 {
		warm.N = int64(cfg.Callers * 16)
	}
	if w := redisbench.Load(ctx, t.Decider, warm); w.Errors > 0 {
		return Sample{}, fmt.Errorf("%s: warm-up: %d of %d calls failed, first: %w", t.Name, w.Errors, w.Decisions, w.FirstErr)
	}
	cpu := func() (srv, rd, self time.Duration, err error) {
		if t.Server != nil {
			if srv, err = t.Server.CPU(); err != nil {
				return
			}
		}
		if t.Redis != nil {
			if rd, err = t.Redis.CPU(ctx); err != nil {
				return
			}
		}
		self, err = ProcessCPU(os.Getpid())
		return
	}
	s0, r0, l0, err := cpu()
	if err != nil {
		return Sample{}, err
	}
	var prof chan profileResult
	if cfg.Profile {
		prof = make(chan profileResult, 1)
		go func() { prof <- takeProfile(ctx, t.Server, cfg.Duration) }()
	}
	if cfg.Start != nil {
		cfg.Start()
	}
	lr := redisbench.Load(ctx, t.Decider, redisbench.LoadConfig{Callers: cfg.Callers, Keys: cfg.Users, Duration: cfg.Duration, N: cfg.N})
	if cfg.Stop != nil {
		cfg.Stop()
	}
	s1, r1, l1, err := cpu()
	if err != nil {
		return Sample{}, err
	}
	per := int64(max(t.ChecksPerCall, 1))
	s := Sample{
		Calls: lr.Decisions, Checks: lr.Decisions * per, Elapsed: lr.Elapsed,
		P50: lr.Latency.Quantile(0.50), P99: lr.Latency.Quantile(0.99), P999: lr.Latency.Quantile(0.999), Max: lr.Latency.Max(),
		Denied: lr.Denied, Errors: lr.Errors,
		ServerCPU: s1 - s0, RedisCPU: r1 - r0, LoadCPU: l1 - l0,
	}
	if lr.Elapsed > 0 {
		s.PerSec = float64(s.Checks) / lr.Elapsed.Seconds()
	}
	if prof != nil {
		pr := <-prof
		s.Profile, s.ProfileErr, s.ProfileData = pr.b, pr.err, pr.data
	}
	switch {
	case lr.Errors > 0:
		return s, fmt.Errorf("%s: %d of %d calls failed, first: %w%s", t.Name, lr.Errors, lr.Decisions, lr.FirstErr, t.serverLog())
	case lr.Denied > 0:
		return s, fmt.Errorf("%s: %d of %d calls denied (no limit is reached in this load: a store failure?)%s", t.Name, lr.Denied, lr.Decisions, t.serverLog())
	}
	return s, nil
}

type profileResult struct {
	b    *Breakdown
	data []byte
	err  error
}

// takeProfile profiles p for the whole seconds of d (at least one).
func takeProfile(ctx context.Context, p *Process, d time.Duration) profileResult {
	if p == nil || p.PprofAddr == "" {
		return profileResult{err: fmt.Errorf("no pprof listener to profile")}
	}
	data, err := FetchCPUProfile(ctx, p.PprofAddr, max(d.Truncate(time.Second), time.Second))
	if err != nil {
		return profileResult{err: err}
	}
	b, err := Analyze(data)
	if err != nil {
		return profileResult{err: err}
	}
	return profileResult{b: &b, data: data}
}

// serverLog returns the end of the server's log, for an error message.
func (t Target) serverLog() string {
	if t.Server == nil {
		return ""
	}
	out := t.Server.Output()
	if out == "" {
		return ""
	}
	if len(out) > 2000 {
		out = "…" + out[len(out)-2000:]
	}
	return "; " + t.Server.Name + " logged:\n" + out
}
