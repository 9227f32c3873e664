package servicebench

import (
	"context"
	"debug/buildinfo"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// FloorPackage is the floor's main package in the bench module: a grpc-go
// server answering ShouldRateLimit and CheckRateLimit with constant
// responses and ratelimitd's server options.
const FloorPackage = "./cmd/grpcfloor"

// BuildFloor builds the floor (FloorPackage of the bench module in
// benchDir) into dir and returns the binary's path.
func BuildFloor(ctx context.Context, goBin, benchDir, dir string, log io.Writer) (string, error) {
	bin := filepath.Join(dir, "grpcfloor")
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", bin, FloorPackage)
	cmd.Dir = benchDir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("grpcfloor: go build %s in %s: %w", FloorPackage, benchDir, err)
	}
	return bin, nil
}

// StartFloor starts the floor (bin) on a free loopback port, with
// net/http/pprof on another if pprof is set, and waits until ready succeeds
// on its gRPC address (nil: until it answers ShouldRateLimit with the
// rules' limit, as the servers do).
func StartFloor(ctx context.Context, bin string, pprof bool, ready func(ctx context.Context, grpcAddr string) error) (*Process, error) {
	if ready == nil {
		ready = probe
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	grpcAddr := loopback(ports[0])
	args := []string{"-grpc-addr", grpcAddr, "-rate", fmt.Sprint(Rate)}
	pprofAddr := ""
	if pprof {
		pprofAddr = loopback(ports[1])
		args = append(args, "-pprof-addr", pprofAddr)
	}
	p, err := start("grpcfloor", bin, args, nil, "")
	if err != nil {
		return nil, err
	}
	p.GRPCAddr, p.PprofAddr = grpcAddr, pprofAddr
	if err := p.waitReady(ctx, 30*time.Second, func(ctx context.Context) error { return ready(ctx, p.GRPCAddr) }); err != nil {
		return nil, err
	}
	return p, nil
}

// GRPCModule is grpc-go's module path.
const GRPCModule = "google.golang.org/grpc"

// ModuleVersion returns the version of module path linked into the Go
// binary bin, from its build info ("" if it links none).
func ModuleVersion(bin, path string) (string, error) {
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		return "", fmt.Errorf("build info of %s: %w", bin, err)
	}
	for _, d := range bi.Deps {
		if d.Path != path {
			continue
		}
		if d.Replace != nil {
			d = d.Replace
		}
		return d.Version, nil
	}
	return "", nil
}
