package leasebench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/bench/redisbench"
)

// HotKeyConfig sizes the hot-key scenario.
type HotKeyConfig struct {
	// Procs processes of Goroutines goroutines each decide the hot key for
	// Duration.
	Procs, Goroutines int
	Duration          time.Duration
	// Hold is the policy's Lease in the leased runs.
	Hold time.Duration
}

// DefaultHotKey is the configuration: four processes.
var DefaultHotKey = HotKeyConfig{Procs: 4, Goroutines: 16, Duration: 2 * time.Second, Hold: 100 * time.Millisecond}

// HotKeyResult is one run of the hot-key scenario.
type HotKeyResult struct {
	Mode                string // "exact" or "leased"
	Decisions, Admitted int64
	Elapsed             time.Duration // from the go signal to the last process's end
	// RedisCalls are the script calls (FCALL, EVALSHA, EVAL) the server
	// counted, RedisCPU its CPU time (every thread), over the run.
	RedisCalls int64
	RedisCPU   time.Duration
}

// PerSecond is the fleet's decisions per second.
func (r HotKeyResult) PerSecond() float64 { return float64(r.Decisions) / r.Elapsed.Seconds() }

// CallsPerDecision is the Redis calls per decision.
func (r HotKeyResult) CallsPerDecision() float64 { return float64(r.RedisCalls) / float64(r.Decisions) }

// CPUPerDecision is Redis's CPU time per decision.
func (r HotKeyResult) CPUPerDecision() time.Duration {
	return time.Duration(float64(r.RedisCPU) / float64(r.Decisions))
}

// hotRate is the hot identity's limit per second: never reached, so that
// both paths decide admissions (the hot key under its limit).
const hotRate = 100_000_000_000

// RunHotKey runs mode ("exact": every decision a Redis call; "leased":
// decided from blocks) on srv from cfg.Procs processes of this program
// (see MaybeChild), and measures Redis around them.
func RunHotKey(ctx context.Context, srv *redisbench.Server, mode string, cfg HotKeyConfig) (HotKeyResult, error) {
	admin := srv.Admin() // the server's own: not closed here
	if err := admin.FlushAll(ctx).Err(); err != nil {
		return HotKeyResult{}, fmt.Errorf("FLUSHALL: %w", err)
	}
	dir, err := os.MkdirTemp("", "leasebench")
	if err != nil {
		return HotKeyResult{}, err
	}
	defer os.RemoveAll(dir)
	t := task{addr: srv.Addr, mode: mode, goroutines: cfg.Goroutines, duration: cfg.Duration, hold: cfg.Hold, limit: hotLimit(hotRate, time.Second), dir: dir}
	cmds, outs := make([]*exec.Cmd, cfg.Procs), make([]*bytes.Buffer, cfg.Procs)
	for i := range cmds {
		cmds[i] = exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmds[i].Env = append(os.Environ(), t.env())
		outs[i] = new(bytes.Buffer)
		cmds[i].Stdout, cmds[i].Stderr = outs[i], outs[i]
		if err := cmds[i].Start(); err != nil {
			return HotKeyResult{}, fmt.Errorf("starting process %d: %w", i, err)
		}
	}
	calls0, cpu0, err := serverCounters(ctx, admin)
	if err != nil {
		return HotKeyResult{}, err
	}
	start := time.Now()
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		return HotKeyResult{}, err
	}
	res := HotKeyResult{Mode: mode}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			return HotKeyResult{}, fmt.Errorf("process %d: %w: %s", i, err, outs[i])
		}
		var d, a int64
		if _, err := fmt.Sscan(outs[i].String(), &d, &a); err != nil {
			return HotKeyResult{}, fmt.Errorf("process %d said %q: %w", i, outs[i], err)
		}
		res.Decisions, res.Admitted = res.Decisions+d, res.Admitted+a
	}
	res.Elapsed = time.Since(start)
	calls1, cpu1, err := serverCounters(ctx, admin)
	if err != nil {
		return HotKeyResult{}, err
	}
	res.RedisCalls, res.RedisCPU = calls1-calls0, cpu1-cpu0
	if res.Admitted != res.Decisions {
		return res, fmt.Errorf("%s: %d of %d decisions denied under a limit never reached", mode, res.Decisions-res.Admitted, res.Decisions)
	}
	return res, nil
}

// serverCounters reads the script calls (FCALL, EVALSHA, EVAL) and the CPU
// time (every thread) of the server.
func serverCounters(ctx context.Context, admin *redis.Client) (calls int64, cpu time.Duration, err error) {
	info, err := admin.Info(ctx, "cpu", "commandstats").Result()
	if err != nil {
		return 0, 0, fmt.Errorf("INFO: %w", err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch k {
		case "used_cpu_sys", "used_cpu_user":
			f, _ := strconv.ParseFloat(v, 64)
			cpu += time.Duration(f * 1e9)
		case "cmdstat_evalsha", "cmdstat_eval", "cmdstat_fcall":
			for _, kv := range strings.Split(v, ",") {
				if name, val, _ := strings.Cut(kv, "="); name == "calls" {
					n, _ := strconv.ParseInt(val, 10, 64)
					calls += n
				}
			}
		}
	}
	return calls, cpu, nil
}
