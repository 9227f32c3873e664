package servicebench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/sluicehq/sluice/bench/redisbench"
)

// Servers builds or installs the servers' binaries and starts the
// processes the implementations run on, once each, on one redis-server,
// and stops them on Close.
type Servers struct {
	// Redis is the shared redis-server.
	Redis *redisbench.Server
	// GoCommand builds ratelimitd and installs envoyproxy/ratelimit.
	GoCommand string
	// CacheDir holds envoyproxy/ratelimit's binary (see CacheDir).
	CacheDir string
	// ServiceDir is the service module's directory (../service from bench).
	ServiceDir string
	// BenchDir is the bench module's directory, whose FloorPackage is built
	// ("" is ".", the report's working directory).
	BenchDir string
	// Log receives the go command's output.
	Log io.Writer
	// Profile starts ratelimitd and the floor with net/http/pprof on a
	// loopback port (Process.PprofAddr), so that a run can profile them.
	Profile bool

	buildDir string
	bins     map[Server]binary
	procs    map[string]*Process
	failed   map[string]error
}

// binary is a server's built or installed binary, or why there is none.
type binary struct {
	path string
	err  error
}

// Binary returns the path of server's binary, building or installing it on
// first use.
func (s *Servers) Binary(ctx context.Context, server Server) (string, error) {
	if b, ok := s.bins[server]; ok {
		return b.path, b.err
	}
	if s.bins == nil {
		s.bins = map[Server]binary{}
	}
	var b binary
	switch server {
	case EnvoyRatelimit:
		b.path, b.err = InstallEnvoyRatelimit(ctx, s.GoCommand, s.CacheDir, s.Log)
	case Ratelimitd, Floor:
		dir, err := s.dir()
		if err != nil {
			b.err = err
			break
		}
		if server == Ratelimitd {
			b.path, b.err = BuildRatelimitd(ctx, s.GoCommand, s.ServiceDir, dir, s.Log)
		} else {
			b.path, b.err = BuildFloor(ctx, s.GoCommand, cmp.Or(s.BenchDir, "."), dir, s.Log)
		}
	default:
		b.err = fmt.Errorf("%s: no binary", server)
	}
	s.bins[server] = b
	return b.path, b.err
}

// dir returns the directory the binaries are built into.
func (s *Servers) dir() (string, error) {
	if s.buildDir == "" {
		d, err := os.MkdirTemp("", "sluice-bench-build-")
		if err != nil {
			return "", err
		}
		s.buildDir = d
	}
	return s.buildDir, nil
}

// GRPCVersions returns the grpc-go version linked into ratelimitd and into
// the floor, building them if needed: the floor measures gRPC's cost only
// if they are the same.
func (s *Servers) GRPCVersions(ctx context.Context) (ratelimitd, floor string, err error) {
	rl, err := s.Binary(ctx, Ratelimitd)
	if err != nil {
		return "", "", err
	}
	fl, err := s.Binary(ctx, Floor)
	if err != nil {
		return "", "", err
	}
	if ratelimitd, err = ModuleVersion(rl, GRPCModule); err != nil {
		return "", "", err
	}
	floor, err = ModuleVersion(fl, GRPCModule)
	return ratelimitd, floor, err
}

// Start returns the running server of im, starting it on first use (and
// remembering a failure to start).
func (s *Servers) Start(ctx context.Context, im Impl) (*Process, error) {
	k := im.key()
	if p, ok := s.procs[k]; ok {
		return p, nil
	}
	if err, ok := s.failed[k]; ok {
		return nil, err
	}
	p, err := s.start(ctx, im)
	if s.procs == nil {
		s.procs, s.failed = map[string]*Process{}, map[string]error{}
	}
	if err != nil {
		s.failed[k] = err
		return nil, err
	}
	s.procs[k] = p
	return p, nil
}

func (s *Servers) start(ctx context.Context, im Impl) (*Process, error) {
	if im.Server == InProcess {
		return nil, fmt.Errorf("%s: no server to start", im.Name)
	}
	bin, err := s.Binary(ctx, im.Server)
	if err != nil {
		return nil, err
	}
	rules := im.rules()
	redisAddr := ""
	if im.Redis {
		if s.Redis == nil {
			return nil, fmt.Errorf("%s: no redis-server", im.Name)
		}
		redisAddr = s.Redis.Addr
	}
	switch im.Server {
	case EnvoyRatelimit:
		return StartEnvoyRatelimit(ctx, bin, redisAddr, rules, im.Env...)
	case Floor:
		return StartFloor(ctx, bin, s.Profile, im.Ready)
	}
	return StartRatelimitd(ctx, bin, redisAddr, rules, s.Profile, im.Ready)
}

// Close stops every server started and removes the built binary.
func (s *Servers) Close() error {
	var wg sync.WaitGroup
	for _, p := range s.procs {
		wg.Go(func() { p.Close() })
	}
	wg.Wait()
	s.procs = nil
	if s.buildDir != "" {
		os.RemoveAll(s.buildDir)
	}
	return nil
}

// Target starts im's server if it has one and it is not running, opens
// conns connections to it and returns the Target of a run; done closes the
// connections and what the decider holds.
func (s *Servers) Target(ctx context.Context, im Impl, conns, callers int, users []string) (t Target, done func(), err error) {
	c := Conn{Users: users, Callers: callers}
	if s.Redis != nil {
		c.RedisAddr = s.Redis.Addr
	}
	t = Target{Name: im.Name, ChecksPerCall: max(im.ChecksPerCall, 1)}
	if im.Redis {
		t.Redis = s.Redis
	}
	if im.Server != InProcess {
		p, err := s.Start(ctx, im)
		if err != nil {
			return Target{}, nil, err
		}
		t.Server, c.HTTPAddr = p, p.HTTPAddr
		if c.GRPC, err = Dial(p.GRPCAddr, conns); err != nil {
			return Target{}, nil, err
		}
	}
	d, closeFn, err := im.NewDecider(c)
	if err != nil {
		closeAll(c.GRPC)
		return Target{}, nil, fmt.Errorf("%s: %w", im.Name, err)
	}
	t.Decider = d
	return t, func() {
		if closeFn != nil {
			closeFn()
		}
		closeAll(c.GRPC)
	}, nil
}
