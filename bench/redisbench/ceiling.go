package redisbench

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// CeilingRequests is the -n of the report's redis-benchmark runs.
const CeilingRequests = 200_000

var rpsRE = regexp.MustCompile(`([0-9.]+) requests per second(?:, p50=([0-9.]+) msec)?`)

// RunCeiling runs redis-benchmark (bin) on the server at port: callers
// connections (-c), n requests (-n), pipeline depth impl.Pipeline (-P),
// each an EVALSHA of RawScript on a key "user:<12 digits>" drawn from
// identities (-r). Its requests per second are the decisions per second of
// the Sample; Latency has only the p50 redis-benchmark -q prints, ClientCPU
// is redis-benchmark's own CPU time. The run is killed after timeout.
func RunCeiling(ctx context.Context, admin *redis.Client, port int, bin string, impl Impl, callers, identities, n int, timeout time.Duration) (Sample, error) {
	if err := admin.FlushAll(ctx).Err(); err != nil {
		return Sample{}, fmt.Errorf("FLUSHALL: %w", err)
	}
	sha, err := admin.ScriptLoad(ctx, RawScript).Result()
	if err != nil {
		return Sample{}, fmt.Errorf("SCRIPT LOAD: %w", err)
	}
	args := []string{"-h", "127.0.0.1", "-p", strconv.Itoa(port), "-c", strconv.Itoa(callers),
		"-n", strconv.Itoa(n), "-r", strconv.Itoa(identities), "-q"}
	if impl.Pipeline > 1 {
		args = append(args, "-P", strconv.Itoa(impl.Pipeline))
	}
	args = append(args, "EVALSHA", sha, "1", "user:__rand_int__")
	before, err := serverStats(ctx, admin)
	if err != nil {
		return Sample{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(rctx, bin, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return Sample{}, fmt.Errorf("%s %v: %w\n%s", bin, args, err, out)
	}
	after, err := serverStats(ctx, admin)
	if err != nil {
		return Sample{}, err
	}
	m := rpsRE.FindAllSubmatch(out, -1)
	if len(m) == 0 {
		return Sample{}, fmt.Errorf("redis-benchmark: no \"requests per second\" in its output:\n%s", out)
	}
	last := m[len(m)-1]
	rps, err := strconv.ParseFloat(string(last[1]), 64)
	if err != nil || rps <= 0 {
		return Sample{}, fmt.Errorf("redis-benchmark: bad requests per second %q", last[1])
	}
	s := Sample{
		Decisions: int64(n), PerSec: rps, Elapsed: time.Duration(float64(n) / rps * 1e9),
		ServerCPU:   after.cpu - before.cpu,
		ScriptCalls: after.scriptCalls - before.scriptCalls, ScriptTime: after.scriptTime - before.scriptTime,
		Commands: int64(n), RoundTrips: int64((n + impl.Pipeline - 1) / impl.Pipeline),
		Conns: callers,
	}
	if len(last[2]) > 0 {
		ms, _ := strconv.ParseFloat(string(last[2]), 64)
		s.P50 = time.Duration(ms * 1e6)
	}
	if ps := cmd.ProcessState; ps != nil {
		s.ClientCPU = ps.UserTime() + ps.SystemTime()
	}
	if s.ScriptCalls < int64(n) {
		return s, fmt.Errorf("redis-benchmark: the server ran %d scripts, want %d", s.ScriptCalls, n)
	}
	return s, nil
}
