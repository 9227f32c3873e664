package servicebench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// ErrNoRatelimitd says the service module has no cmd/ratelimitd to build.
var ErrNoRatelimitd = errors.New("service/cmd/ratelimitd not found")

// BuildRatelimitd builds ratelimitd from the service module in serviceDir
// (its cmd/ratelimitd, as it is in the working tree) into dir and returns
// the binary's path. It wraps ErrNoRatelimitd when there is nothing to
// build.
func BuildRatelimitd(ctx context.Context, goBin, serviceDir, dir string, log io.Writer) (string, error) {
	if _, err := os.Stat(filepath.Join(serviceDir, "cmd", "ratelimitd")); errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("ratelimitd: %w in %s", ErrNoRatelimitd, serviceDir)
	}
	bin := filepath.Join(dir, "ratelimitd")
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", bin, "./cmd/ratelimitd")
	cmd.Dir = serviceDir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("ratelimitd: go build ./cmd/ratelimitd in %s: %w", serviceDir, err)
	}
	return bin, nil
}

// RatelimitdArgs are the options ratelimitd runs with besides its addresses
// and rules: a store failure is a denial (which fails the run) rather than
// an admission made without Redis, each Redis call may take up to a second
// (as the Redis scenario gives sluice's store: a stall of a loaded machine
// does not fail the run; the code path is the same as with the default 5
// ms), warnings only in the log, as envoyproxy/ratelimit logs by default,
// and no drain delay when the benchmark stops it.
var RatelimitdArgs = []string{"--failure-mode", "closed", "--store-timeout", "1s", "--log-level", "warn", "--drain-delay", "0s"}

// PprofFlag is ratelimitd's flag that serves net/http/pprof on its own
// listener (off by default).
const PprofFlag = "--pprof-addr"

// StartRatelimitd starts `ratelimitd serve` (bin) on free loopback ports with
// rules written to a fresh file, on the redis-server at redisAddr ("" for
// its memory store), with net/http/pprof on a loopback port of its own if
// pprof is set (PprofFlag), and waits until ready succeeds on its gRPC
// address (nil: until it answers ShouldRateLimit under RulesYAML).
func StartRatelimitd(ctx context.Context, bin, redisAddr string, rules []byte, pprof bool, ready func(ctx context.Context, grpcAddr string) error) (*Process, error) {
	if ready == nil {
		ready = probe
	}
	dir, err := os.MkdirTemp("", "sluice-bench-ratelimitd-")
	if err != nil {
		return nil, err
	}
	file := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(file, rules, 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	ports, err := freePorts(3)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p := &Process{GRPCAddr: loopback(ports[0]), HTTPAddr: loopback(ports[1])}
	args := append([]string{"serve", "--rules", file, "--grpc-addr", p.GRPCAddr, "--http-addr", p.HTTPAddr}, RatelimitdArgs...)
	name := "ratelimitd (memory store)"
	if redisAddr != "" {
		args = append(args, "--redis", redisAddr)
		name = "ratelimitd (Redis)"
	}
	if pprof {
		p.PprofAddr = loopback(ports[2])
		args = append(args, PprofFlag, p.PprofAddr)
	}
	started, err := start(name, bin, args, nil, dir)
	if err != nil {
		return nil, err
	}
	started.GRPCAddr, started.HTTPAddr, started.PprofAddr, started.RulesFile = p.GRPCAddr, p.HTTPAddr, p.PprofAddr, file
	if err := started.waitReady(ctx, 30*time.Second, func(ctx context.Context) error { return ready(ctx, started.GRPCAddr) }); err != nil {
		return nil, err
	}
	return started, nil
}

// StartRatelimitdDB starts `ratelimitd serve --db dsn` on its memory store
// and free loopback ports, with RatelimitdArgs and extra (for example
// --db-poll), and waits until ready succeeds on its gRPC address (nil: the
// gRPC health service's SERVING is not checked; the first successful
// ready call counts). The process's RulesFile is empty.
func StartRatelimitdDB(ctx context.Context, bin, dsn string, extra []string, ready func(ctx context.Context, grpcAddr string) error) (*Process, error) {
	if ready == nil {
		return nil, errors.New("ratelimitd --db: a readiness probe is required")
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	grpcAddr, httpAddr := loopback(ports[0]), loopback(ports[1])
	args := append([]string{"serve", "--db", dsn, "--grpc-addr", grpcAddr, "--http-addr", httpAddr}, RatelimitdArgs...)
	args = append(args, extra...)
	p, err := start("ratelimitd (--db)", bin, args, nil, "")
	if err != nil {
		return nil, err
	}
	p.GRPCAddr, p.HTTPAddr = grpcAddr, httpAddr
	if err := p.waitReady(ctx, 30*time.Second, func(ctx context.Context) error { return ready(ctx, p.GRPCAddr) }); err != nil {
		return nil, err
	}
	return p, nil
}
