// Package grpcapi serves ratelimitd's native gRPC API,
// sluice.ratelimit.v1.RateLimitService, on an engine: it translates each
// request into an engine.Check, answers with the engine's decision and the
// rate-limit metadata the sluice middleware sends, and registers the
// standard grpc.health.v1 service (with component health: store, rules,
// draining) and server reflection next to it.
//
// A denial is an answer, not an error (allowed = false). Bad input is
// INVALID_ARGUMENT with a google.rpc.BadRequest naming the field; a store
// failure is UNAVAILABLE with a generic message, the store's error is only
// logged.
package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/sluicehq/sluice/ratelimitfields"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/ratelimitv1"
)

// The health components: each is also a service name of grpc.health.v1,
// SERVING while the component is healthy. The overall status (service ""
// and ServiceName) is SERVING only while all of them are.
const (
	// ComponentStore is the store: reachable.
	ComponentStore = "store"
	// ComponentRules is the rule set: loaded.
	ComponentRules = "rules"
	// ComponentDraining is SERVING until Drain is called.
	ComponentDraining = "draining"
)

// ServiceName is the full name of the native API's service, as health
// checks and reflection name it.
const ServiceName = "sluice.ratelimit.v1.RateLimitService"

// DefaultMaxBatch is the default bound on the checks of one
// CheckRateLimitBatch call.
const DefaultMaxBatch = 1000

// Server is the native gRPC API on one engine, with its health service. Its
// methods are safe for concurrent use.
type Server struct {
	ratelimitv1.UnimplementedRateLimitServiceServer

	engine   *engine.Engine
	log      *slog.Logger
	headers  ratelimitfields.Config
	fields   *engine.Formatter // of headers
	noFields bool
	maxBatch int
	now      func() time.Time
	record   Recorder
	batches  sync.Pool // *batchScratch

	health  *health.Server
	mu      sync.Mutex
	state   map[string]bool // component -> healthy
	drained bool
}

// Option configures a Server.
type Option func(*Server)

// WithLogger sets the logger store failures are reported to (default
// slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(s *Server) {
		if l != nil {
			s.log = l
		}
	}
}

// WithHeaders selects the rate-limit fields sent as response metadata of
// CheckRateLimit, GetRemainingQuota and Report (default: all of them, as the
// sluice middleware sends them).
func WithHeaders(h ratelimitfields.Config) Option { return func(s *Server) { s.headers = h } }

// WithoutHeaders sends no rate-limit metadata: the response messages carry
// the decision.
func WithoutHeaders() Option { return func(s *Server) { s.noFields = true } }

// WithMaxBatch bounds the checks of one CheckRateLimitBatch call (default
// DefaultMaxBatch); n < 1 keeps the default.
func WithMaxBatch(n int) Option {
	return func(s *Server) {
		if n >= 1 {
			s.maxBatch = n
		}
	}
}

// Reset is the change a ResetLimit makes, for a Recorder: its Target
// names the identifier ("limit/DIMENSION/IDENTIFIER") and After the
// request (endpoint, rule_id), as JSON values.
type Reset struct {
	Target string
	After  any
}

// Recorder records a ResetLimit and makes it: it calls apply (which
// resets the counters) at most once and returns apply's error, or its own
// when it could not record the change (the call is then UNAVAILABLE, and
// nothing is reset). apply's error undoes the record. It is called
// concurrently.
type Recorder func(ctx context.Context, r Reset, apply func(context.Context) error) error

// WithRecorder makes every ResetLimit run through r (ratelimitd's writes
// its audit row); the default resets without recording.
func WithRecorder(r Recorder) Option {
	return func(s *Server) {
		if r != nil {
			s.record = r
		}
	}
}

// New returns the native API on e. Every component starts healthy: the
// caller reports a store or a rule set that is not (SetComponent), or has
// a probe do it (WatchComponent).
func New(e *engine.Engine, opts ...Option) *Server {
	s := &Server{
		engine:   e,
		log:      slog.Default(),
		maxBatch: DefaultMaxBatch,
		now:      time.Now,
		record:   func(ctx context.Context, _ Reset, apply func(context.Context) error) error { return apply(ctx) },
		health:   health.NewServer(),
		state: map[string]bool{
			ComponentStore:    true,
			ComponentRules:    true,
			ComponentDraining: true,
		},
	}
	for _, o := range opts {
		o(s)
	}
	s.fields = engine.NewFormatter(s.headers)
	s.publish()
	return s
}

// Register registers the RateLimitService, grpc.health.v1 and server
// reflection on g (call it before g.Serve).
func (s *Server) Register(g *grpc.Server) {
	ratelimitv1.RegisterRateLimitServiceServer(g, s)
	healthpb.RegisterHealthServer(g, s.health)
	reflection.Register(g)
}

// Health returns the health service Register registers, for a server that
// wants to register it elsewhere or add its own services to it.
func (s *Server) Health() *health.Server { return s.health }

// SetComponent reports whether component name (ComponentStore,
// ComponentRules or any other name) is healthy; the overall status
// follows. Once Drain was called, nothing is SERVING again.
func (s *Server) SetComponent(name string, ok bool) {
	if name == "" || name == ServiceName {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.drained {
		return // draining is final
	}
	if prev, known := s.state[name]; known && prev == ok {
		return
	}
	s.state[name] = ok
	s.publishLocked()
}

// Drain reports NOT_SERVING for every service and component, for good:
// load balancers and health-checking clients stop sending calls while the
// calls in flight finish (grpc.Server.GracefulStop).
func (s *Server) Drain() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drained = true
	for name := range s.state {
		s.state[name] = false
	}
	s.publishLocked()
}

// WatchComponent runs probe every interval until ctx ends, reporting
// component name healthy when it returns nil; it returns ctx's error. A
// probe gets at most one interval to answer.
func (s *Server) WatchComponent(ctx context.Context, name string, every time.Duration, probe func(context.Context) error) error {
	if every <= 0 {
		return fmt.Errorf("grpcapi: WatchComponent: every: must be positive, got %v", every)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, every)
		err := probe(pctx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil && s.healthy(name) {
			s.log.WarnContext(ctx, "ratelimitd: component unhealthy", "component", name, "error", err)
		}
		s.SetComponent(name, err == nil)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

func (s *Server) healthy(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state[name]
}

func (s *Server) publish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.publishLocked()
}

// publishLocked sets the health service's statuses from s.state.
func (s *Server) publishLocked() {
	all := true
	for name, ok := range s.state {
		s.health.SetServingStatus(name, servingStatus(ok))
		all = all && ok
	}
	s.health.SetServingStatus("", servingStatus(all))
	s.health.SetServingStatus(ServiceName, servingStatus(all))
}

func servingStatus(ok bool) healthpb.HealthCheckResponse_ServingStatus {
	if ok {
		return healthpb.HealthCheckResponse_SERVING
	}
	return healthpb.HealthCheckResponse_NOT_SERVING
}

// errStore reports that the store could not decide; its error is logged,
// never sent.
var errStore = errors.New("rate limit store unavailable")
