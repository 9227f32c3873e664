package servicebench

import (
	"context"
	"fmt"
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
	// Rate, if positive, makes the measured load an open loop (LoadOpen):
	// Rate calls per second offered for Duration, at most Callers in
	// flight. The warm-up stays a closed loop.
	Rate float64
}

// Sample is what one run measured.
type Sample struct {
	Calls, Checks int64
	Elapsed       time.Duration
	// PerSec is checks per second of elapsed time.
	PerSec float64
	// Latency of one call as its caller saw it (open loop: from the time
	// it was due).
	P50, P99, P999, Max time.Duration
	// Latency is the histogram behind them, to merge runs.
	Latency        *redisbench.Histogram
	Denied, Errors int64
	// Open-loop runs only: the offered rate (calls per second), the
	// latency from each call's send (SentP99), how late calls were sent
	// (LagP99) and the most calls in flight at once.
	Offered         float64
	SentP99, LagP99 time.Duration
	MaxInFlight     int64
	// ServerLog is what the server wrote to stdout and stderr during the
	// measured load, in bytes.
	ServerLog int64
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

	firstErr error
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
	s0, r0, l0, err := t.cpu(ctx)
	if err != nil {
		return Sample{}, err
	}
	var prof chan profileResult
	if cfg.Profile {
		prof = make(chan profileResult, 1)
		go func() { prof <- takeProfile(ctx, t.Server, cfg.Duration) }()
	}
	log0 := t.logSize()
	if cfg.Start != nil {
		cfg.Start()
	}
	s := measure(ctx, t, cfg)
	if cfg.Stop != nil {
		cfg.Stop()
	}
	s1, r1, l1, err := t.cpu(ctx)
	if err != nil {
		return Sample{}, err
	}
	s.ServerCPU, s.RedisCPU, s.LoadCPU = s1-s0, r1-r0, l1-l0
	s.ServerLog = t.logSize() - log0
	if prof != nil {
		pr := <-prof
		s.Profile, s.ProfileErr, s.ProfileData = pr.b, pr.err, pr.data
	}
	switch {
	case s.Errors > 0:
		return s, fmt.Errorf("%s: %d of %d calls failed, first: %w%s", t.Name, s.Errors, s.Calls, s.firstErr, t.serverLog())
	case s.Denied > 0:
		return s, fmt.Errorf("%s: %d of %d calls denied (no limit is reached in this load: a store failure?)%s", t.Name, s.Denied, s.Calls, t.serverLog())
	}
	return s, nil
}

// measure runs the measured load of cfg on t, closed or open loop.
func measure(ctx context.Context, t Target, cfg RunConfig) Sample {
	per := int64(max(t.ChecksPerCall, 1))
	var s Sample
	var h *redisbench.Histogram
	if cfg.Rate > 0 {
		or := LoadOpen(ctx, t.Decider, OpenConfig{Callers: cfg.Callers, Keys: cfg.Users, Rate: cfg.Rate, Duration: cfg.Duration})
		s = Sample{Calls: or.Calls, Elapsed: or.Elapsed, Denied: or.Denied, Errors: or.Errors, firstErr: or.FirstErr,
			Offered: cfg.Rate, SentP99: or.Sent.Quantile(0.99), LagP99: or.Lag.Quantile(0.99), MaxInFlight: or.MaxInFlight}
		h = &or.Latency
	} else {
		lr := redisbench.Load(ctx, t.Decider, redisbench.LoadConfig{Callers: cfg.Callers, Keys: cfg.Users, Duration: cfg.Duration, N: cfg.N})
		s = Sample{Calls: lr.Decisions, Elapsed: lr.Elapsed, Denied: lr.Denied, Errors: lr.Errors, firstErr: lr.FirstErr}
		h = &lr.Latency
	}
	s.Checks = s.Calls * per
	s.Latency = h
	s.P50, s.P99, s.P999, s.Max = h.Quantile(0.50), h.Quantile(0.99), h.Quantile(0.999), h.Max()
	if s.Elapsed > 0 {
		s.PerSec = float64(s.Checks) / s.Elapsed.Seconds()
	}
	return s
}

// cpu reads the CPU time used so far by t's server, its redis-server and
// this process (the load generator).
func (t Target) cpu(ctx context.Context) (srv, rd, self time.Duration, err error) {
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
	self, err = SelfCPU()
	return
}

// logSize is what t's server has written to its log so far.
func (t Target) logSize() int64 {
	if t.Server == nil {
		return 0
	}
	return t.Server.LogSize()
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
