package servicebench

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/sluicehq/sluice/bench/redisbench"
)

// Servers starts the processes the implementations run on, once each, on
// one redis-server, and stops them on Close.
type Servers struct {
	// Redis is the shared redis-server.
	Redis *redisbench.Server
	// GoCommand builds ratelimitd and installs envoyproxy/ratelimit.
	GoCommand string
	// CacheDir holds envoyproxy/ratelimit's binary (see CacheDir).
	CacheDir string
	// ServiceDir is the service module's directory (../service from bench).
	ServiceDir string
	// Log receives the go command's output.
	Log io.Writer
	// Profile starts ratelimitd with net/http/pprof on a loopback port
	// (Process.PprofAddr), so that a run can profile it.
	Profile bool

	buildDir        string
	envoyBin, rlBin string
	envoyErr, rlErr error
	binsDone        [2]bool
	procs           map[string]*Process
	failed          map[string]error
}

// Binary returns the path of server's binary, building or installing it on
// first use.
func (s *Servers) Binary(ctx context.Context, server Server) (string, error) {
	if !s.binsDone[server] {
		s.binsDone[server] = true
		switch server {
		case EnvoyRatelimit:
			s.envoyBin, s.envoyErr = InstallEnvoyRatelimit(ctx, s.GoCommand, s.CacheDir, s.Log)
		case Ratelimitd:
			if s.buildDir == "" {
				d, err := os.MkdirTemp("", "sluice-bench-build-")
				if err != nil {
					s.rlErr = err
					break
				}
				s.buildDir = d
			}
			s.rlBin, s.rlErr = BuildRatelimitd(ctx, s.GoCommand, s.ServiceDir, s.buildDir, s.Log)
		}
	}
	if server == EnvoyRatelimit {
		return s.envoyBin, s.envoyErr
	}
	return s.rlBin, s.rlErr
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
	if im.Server == EnvoyRatelimit {
		return StartEnvoyRatelimit(ctx, bin, redisAddr, rules, im.Env...)
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
		t.Server = p
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
