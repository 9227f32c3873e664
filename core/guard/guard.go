package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
)

// Mode is what a Store answers while its backend fails.
type Mode uint8

// The failure modes.
const (
	// ModeOpen allows every request unchecked (Result.Source FailedOpen).
	ModeOpen Mode = iota
	// ModeClosed denies every request with a short RetryAfter (Result.Source
	// FailedClosed).
	ModeClosed
	// ModeFallback decides in a local in-memory limiter whose limits are
	// divided by the expected number of instances (Result.Source
	// FromFallback).
	ModeFallback
)

// String returns "open", "closed" or "fallback".
func (m Mode) String() string {
	switch m {
	case ModeOpen:
		return "open"
	case ModeClosed:
		return "closed"
	case ModeFallback:
		return "fallback"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// Defaults of a Store.
const (
	// DefaultTimeout bounds each backend call: well under the 10 ms budget
	// of one check, and about 20 times a loopback Redis round trip.
	DefaultTimeout = 5 * time.Millisecond
	// DefaultFailures is how many consecutive failures open the circuit.
	DefaultFailures = 5
	// DefaultCooldown is how long the circuit stays open before a probe.
	DefaultCooldown = time.Second
	// DefaultClosedRetry is the RetryAfter of a fail-closed denial.
	DefaultClosedRetry = time.Second
	// DefaultDenyTTL caps how long the deny cache holds one denial.
	DefaultDenyTTL = 10 * time.Second
)

// Store wraps a backend Store (usually the Redis store) with a per-call
// timeout, a failure mode, a circuit breaker and an optional deny cache.
// It is itself a core.Store, so a Limiter uses it in place of the backend:
// decisions and refunds pass through the circuits, and admin calls (Reset,
// SetOverride, ClearOverride) reach the backend, the deny cache and the
// fallback limiter alike.
//
// Errors that describe the call (ErrInvalidLimit, ErrInvalidCost, ErrNoKey)
// and the cancellation of the caller's own context are returned as they
// are. Any other error is a backend failure: it is counted by the breaker,
// reported to the Observers, and answered by the Mode, never returned.
//
// A Store is safe for concurrent use. It starts no goroutine of its own;
// Close releases the fallback limiter (it does not close the backend).
type Store struct {
	backend core.Store
	cfg     config
	local   *memorystore.Store // ModeFallback only
	deny    *denyCache         // nil unless WithDenyCache
	epoch   time.Time          // origin of the monotonic nanoseconds below

	// shares caches the local shares of limits in fallback (see share).
	shares [shareSlots]atomic.Pointer[shared]

	sharded Sharded // backend as a Sharded, or nil
	// bounded: the backend bounds its calls within the timeout (see
	// Bounded), so they run on the caller's context as it is.
	bounded bool
	// eachBufs pools the arrays of TakeEach calls.
	eachBufs sync.Pool
	// whole is the circuit of the backend, or of the keys whose node a
	// Sharded backend cannot tell; nodes holds one per node of a Sharded
	// backend (copied on write: nodes are few and rarely new).
	whole   breaker
	nodes   atomic.Pointer[map[string]*breaker]
	nodesMu sync.Mutex

	// The counters are written by every call: keep them off the cache line
	// of the circuit state, which every call reads.
	_                             [64]byte
	calls, hits, failed, degraded atomic.Uint64
}

type config struct {
	mode        Mode
	closedRetry time.Duration
	instances   int64
	localOpts   []memorystore.Option
	timeout     time.Duration
	breaker     Breaker
	denyCache   *DenyCache
	observers   []Observer
	log         *slog.Logger
	clock       func() time.Time
}

// Option configures a Store.
type Option func(*config)

// WithFailOpen allows requests while the backend fails (the default).
func WithFailOpen() Option { return func(c *config) { c.mode = ModeOpen } }

// WithFailClosed denies requests while the backend fails, with RetryAfter
// retry (DefaultClosedRetry if 0).
func WithFailClosed(retry time.Duration) Option {
	return func(c *config) { c.mode, c.closedRetry = ModeClosed, retry }
}

// WithFallback decides requests in a local in-memory limiter while the
// backend fails. Each limit's Rate and Burst are divided by instances
// (rounded up), so n instances together admit about the shared limit. opts
// configure the local memorystore (WithMaxKeys, say).
func WithFallback(instances int, opts ...memorystore.Option) Option {
	return func(c *config) {
		c.mode, c.instances, c.localOpts = ModeFallback, int64(instances), opts
	}
}

// WithTimeout bounds every backend call (DefaultTimeout). A call that runs
// out of time is a failure. A backend that bounds its own calls within d
// (see Bounded: the Redis store with a WithTimeout of at most d) is called
// on the caller's context as it is.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// Breaker configures the circuit breaker. The zero value means the
// defaults.
type Breaker struct {
	// Failures is how many consecutive failed or timed-out calls open the
	// circuit (DefaultFailures).
	Failures int
	// Cooldown is how long an open circuit answers by the Mode without
	// calling the backend, before one call probes it (DefaultCooldown). A
	// successful probe closes the circuit; a failed one opens it again.
	Cooldown time.Duration
}

// WithBreaker sets the circuit breaker's thresholds.
func WithBreaker(b Breaker) Option { return func(c *config) { c.breaker = b } }

// DenyCache configures the deny cache.
type DenyCache struct {
	// MaxKeys bounds the number of denied keys held (required, > 0). When
	// it is reached, expired entries go first, then arbitrary ones.
	MaxKeys int
	// MaxTTL caps how long one denial is held (DefaultDenyTTL), so a limit
	// raised or a block lifted elsewhere takes effect within MaxTTL.
	MaxTTL time.Duration
}

// WithDenyCache answers a key that the backend denied until an instant
// locally until that instant, without a backend call. It never allows what
// the backend would deny: it only repeats the backend's own denial, for
// requests of the denied cost, until the backend's RetryAfter. A
// refund, a reset or an override made elsewhere may let the backend admit
// sooner; the cache catches up at most MaxTTL later (changes made through
// this Store clear the key at once).
func WithDenyCache(d DenyCache) Option { return func(c *config) { c.denyCache = &d } }

// WithObserver adds an Observer of circuit transitions and backend
// failures.
func WithObserver(o Observer) Option {
	return func(c *config) {
		if o != nil {
			c.observers = append(c.observers, o)
		}
	}
}

// WithLogger sets the logger of circuit transitions (slog.Default() if
// unset). Failures are not logged one by one: the transitions say when the
// backend went away and came back.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// WithClock sets the clock of the breaker's cooldown and the deny cache
// (time.Now by default); tests pass the clock they give the backend.
func WithClock(now func() time.Time) Option { return func(c *config) { c.clock = now } }

// New wraps backend. Without options it fails open with DefaultTimeout and
// the default Breaker, and has no deny cache.
func New(backend core.Store, opts ...Option) (*Store, error) {
	if backend == nil {
		return nil, errors.New("guard: New: nil backend")
	}
	c := config{timeout: DefaultTimeout}
	for _, o := range opts {
		o(&c)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	c.setDefaults()
	s := &Store{backend: backend, cfg: c, epoch: c.clock()}
	s.sharded, _ = backend.(Sharded) // once, when built: an optional hint, not a capability
	if b, ok := backend.(Bounded); ok {
		s.bounded = b.Timeout() > 0 && b.Timeout() <= c.timeout
	}
	if c.denyCache != nil {
		d := *c.denyCache
		switch {
		case d.MaxKeys <= 0:
			return nil, fmt.Errorf("guard: DenyCache.MaxKeys: must be positive, got %d", d.MaxKeys)
		case d.MaxTTL < 0:
			return nil, fmt.Errorf("guard: DenyCache.MaxTTL: must not be negative, got %s", d.MaxTTL)
		case d.MaxTTL == 0:
			d.MaxTTL = DefaultDenyTTL
		}
		s.deny = newDenyCache(d)
	}
	if c.mode == ModeFallback {
		local, err := memorystore.New(c.localOpts...)
		if err != nil {
			return nil, fmt.Errorf("guard: WithFallback: %w", err)
		}
		s.local = local
	}
	return s, nil
}

// validate checks the options' values: a positive timeout, no negative
// retry or breaker setting, a fallback's instances at least 1.
func (c *config) validate() error {
	switch {
	case c.timeout <= 0:
		return fmt.Errorf("guard: WithTimeout: must be positive, got %s", c.timeout)
	case c.closedRetry < 0:
		return fmt.Errorf("guard: WithFailClosed: retry must not be negative, got %s", c.closedRetry)
	case c.mode == ModeFallback && c.instances < 1:
		return fmt.Errorf("guard: WithFallback: instances must be at least 1, got %d", c.instances)
	case c.breaker.Failures < 0:
		return fmt.Errorf("guard: Breaker.Failures: must not be negative, got %d", c.breaker.Failures)
	case c.breaker.Cooldown < 0:
		return fmt.Errorf("guard: Breaker.Cooldown: must not be negative, got %s", c.breaker.Cooldown)
	}
	return nil
}

// setDefaults gives the settings left zero their defaults.
func (c *config) setDefaults() {
	if c.closedRetry == 0 {
		c.closedRetry = DefaultClosedRetry
	}
	if c.breaker.Failures == 0 {
		c.breaker.Failures = DefaultFailures
	}
	if c.breaker.Cooldown == 0 {
		c.breaker.Cooldown = DefaultCooldown
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.clock == nil {
		c.clock = time.Now
	}
}

// Close releases the local fallback limiter. It does not close the
// backend.
func (s *Store) Close() error {
	if s.local != nil {
		return s.local.Close()
	}
	return nil
}

// Mode returns the failure mode.
func (s *Store) Mode() Mode { return s.cfg.mode }

// Stats counts what a Store has done since it was built.
type Stats struct {
	// BackendCalls is the number of decisions sent to the backend (a Take
	// of several ops counts once).
	BackendCalls uint64
	// DenyCacheHits is the number of decisions answered by the deny cache.
	DenyCacheHits uint64
	// Failures is the number of backend calls that failed or timed out.
	Failures uint64
	// Degraded is the number of decisions answered by the failure Mode,
	// whether after a failure or because the circuit was open.
	Degraded uint64
}

// Stats returns the counts so far.
func (s *Store) Stats() Stats {
	return Stats{
		BackendCalls:  s.calls.Load(),
		DenyCacheHits: s.hits.Load(),
		Failures:      s.failed.Load(),
		Degraded:      s.degraded.Load(),
	}
}

// Take decides ops all or nothing: from the deny cache, from the backend,
// or by the Mode when the backend fails or the circuit of an op's node is
// open (see takeSome for a group spanning an open circuit).
func (s *Store) Take(ctx context.Context, ops []core.Op, out []core.Result) error {
	if len(out) != len(ops) {
		return fmt.Errorf("guard: Take: %d results for %d ops", len(out), len(ops))
	}
	switch len(ops) {
	case 0:
		return nil
	case 1:
		return s.takeOne(ctx, ops, out)
	}
	return s.takeGroup(ctx, ops, out)
}

// takeOne decides one op, passing ops and out to the backend as they are.
func (s *Store) takeOne(ctx context.Context, ops []core.Op, out []core.Result) error {
	var p onePass
	if done, err := s.enterOne(ctx, ops, out, &p); done {
		return err
	}
	s.calls.Add(1)
	cctx, cancel := s.bound(ctx)
	err := s.backend.Take(cctx, ops, out)
	cancel()
	return s.leaveOne(ctx, ops, out, &p, err)
}

// onePass is what a take of one op that goes to the backend passed
// through: the circuit of its node, whether it is the circuit's probe, and
// the monotonic instant read for it (0: not yet).
type onePass struct {
	b     *breaker
	probe bool
	now   int64
}

// enterOne answers a take of one op from the deny cache, or, when the
// circuit of its node is open, by the Mode (done, and the take's error);
// otherwise it lets the take through to the backend, noted in p.
func (s *Store) enterOne(ctx context.Context, ops []core.Op, out []core.Result, p *onePass) (done bool, err error) {
	op := &ops[0]
	// A booking is never answered by the deny cache: a denial it holds says
	// that a take must wait, not that a booking within the op's bound fails.
	if s.deny != nil && op.Cost > 0 && op.MaxDelay == 0 {
		p.now = s.mono()
		if res, ok := s.deny.lookupOne(op.Key, op.Limit, op.Cost, p.now); ok {
			s.hits.Add(1)
			out[0] = res
			return true, nil
		}
	}
	p.b = s.nodeOf(op.Key)
	probe, ok := s.admit(p.b, &p.now)
	if !ok {
		return true, s.degradeOne(ctx, op, &out[0])
	}
	p.probe = probe
	return false, nil
}

// leaveOne finishes a take of one op the backend answered with err, which
// went through p: the circuit learns of it, a failure is answered by the
// Mode, a denial is cached.
func (s *Store) leaveOne(ctx context.Context, ops []core.Op, out []core.Result, p *onePass, err error) error {
	op := &ops[0]
	if err != nil {
		if passThrough(ctx, err) {
			s.release(p.b, p.probe)
			return err
		}
		s.report(err)
		s.fail(p.b, err, p.probe)
		return s.degradeOne(ctx, op, &out[0])
	}
	s.succeed(p.b, p.probe)
	if s.deny != nil && op.Cost > 0 && deniedFor(out[0]) {
		if p.now == 0 {
			p.now = s.mono()
		}
		s.deny.storeOne(op.Key, op.Limit, op.Cost, out[0], p.now)
	}
	return nil
}

// takeGroup decides several ops all or nothing, with the same failure
// handling as one.
func (s *Store) takeGroup(ctx context.Context, ops []core.Op, out []core.Result) error {
	var one [4]*breaker
	var two [4]bool
	p := groupPass{bs: one[:0], probes: two[:0]}
	if done, err := s.enterGroup(ctx, ops, out, &p); done {
		return err
	}
	if failed, err := s.callGroup(ctx, ops, out, ops, out, p.bs, p.probes); failed {
		return err
	}
	s.leaveGroup(ops, out, &p)
	return nil
}

// groupPass is what a take of several ops that goes to the backend passed
// through: the circuits of its ops' nodes, whether it is the probe of
// each, and the monotonic instant read for it (0: not yet).
type groupPass struct {
	bs     []*breaker
	probes []bool
	now    int64
}

// enterGroup answers a take of several ops from the deny cache, or, when
// the circuit of one of its nodes is open, as takeSome does (done, and the
// take's error); otherwise it lets the take through to the backend, noted
// in p.
func (s *Store) enterGroup(ctx context.Context, ops []core.Op, out []core.Result, p *groupPass) (done bool, err error) {
	if s.deny != nil {
		p.now = s.mono()
		if s.deny.lookupGroup(ops, out, p.now) {
			s.hits.Add(1)
			return true, nil
		}
	}
	// The circuits of the ops' nodes: all must let the group through.
	if s.sharded == nil {
		p.bs = append(p.bs, &s.whole)
	} else {
		for _, op := range ops {
			if b := s.nodeOf(op.Key); !slices.Contains(p.bs, b) {
				p.bs = append(p.bs, b)
			}
		}
	}
	blocked := false
	for _, b := range p.bs {
		probe, ok := s.admit(b, &p.now)
		p.probes = append(p.probes, probe)
		blocked = blocked || !ok
	}
	if blocked {
		return true, s.takeSome(ctx, ops, out, p.bs, p.probes, p.now)
	}
	return false, nil
}

// leaveGroup finishes a take of several ops the backend decided, which
// went through p: its circuits learn of the success, its denials are
// cached.
func (s *Store) leaveGroup(ops []core.Op, out []core.Result, p *groupPass) {
	for j, b := range p.bs {
		s.succeed(b, p.probes[j])
	}
	if s.deny != nil {
		if p.now == 0 {
			p.now = s.mono()
		}
		s.deny.storeGroup(ops, out, p.now)
	}
}

// callGroup makes the backend call deciding ops into out, through the
// circuits bs (probes[j]: the call is bs[j]'s probe). When it fails, the
// circuits learn of it (or are released, when the caller's own context
// ended: the backend is not to blame) and the whole group, all with its
// results allOut, is answered by the failure mode: failed is then true and
// err is what the caller returns.
func (s *Store) callGroup(ctx context.Context, ops []core.Op, out []core.Result, all []core.Op, allOut []core.Result, bs []*breaker, probes []bool) (failed bool, err error) {
	s.calls.Add(1)
	cctx, cancel := s.bound(ctx)
	err = s.backend.Take(cctx, ops, out)
	cancel()
	if err == nil {
		return false, nil
	}
	return true, s.groupFailed(ctx, err, all, allOut, bs, probes)
}

// groupFailed answers a group whose backend call failed with err, through
// the circuits bs (probes[j]: the call was bs[j]'s probe): the circuits
// learn of it, or are released when the caller's own context ended (err
// is then returned), and the whole group, all with its results allOut, is
// answered by the failure mode.
func (s *Store) groupFailed(ctx context.Context, err error, all []core.Op, allOut []core.Result, bs []*breaker, probes []bool) error {
	if passThrough(ctx, err) {
		for j, b := range bs {
			s.release(b, probes[j])
		}
		return err
	}
	s.failGroup(err, bs, probes)
	return s.degradeAll(ctx, all, allOut)
}

// failGroup records the failure of a group's call through the circuits bs
// (probes[j]: the call is bs[j]'s probe): the failed node's circuit fails,
// or every circuit when the error names no node.
func (s *Store) failGroup(err error, bs []*breaker, probes []bool) {
	s.report(err)
	var ne NodeError
	failed := ""
	if errors.As(err, &ne) {
		failed = ne.FailedNode()
	}
	for j, b := range bs {
		switch probe := probes[j]; {
		case failed == "" || b.node == failed || b.node == "":
			s.fail(b, err, probe)
		default: // another node failed: this one's answer is unknown
			s.release(b, probe)
		}
	}
}

// takeSome answers a group some of whose nodes have their circuit open. In
// ModeOpen, the ops on the nodes whose circuit lets them through are still
// decided by the backend (all or nothing among themselves) and the others
// fail open: a dead node does not take enforcement away from the live
// ones. Other modes answer the whole group by the Mode (ModeClosed denies
// it anyway, and a fallback decides the group locally).
func (s *Store) takeSome(ctx context.Context, ops []core.Op, out []core.Result, bs []*breaker, probes []bool, now int64) error {
	var open []*breaker // the circuits that refused
	var live []int      // the ops whose circuit let them through
	for j, b := range bs {
		if !probes[j] && Circuit(b.circuit.Load()) != Closed {
			open = append(open, b)
		}
	}
	for i, op := range ops {
		if !slices.Contains(open, s.nodeOf(op.Key)) {
			live = append(live, i)
		}
	}
	if s.cfg.mode != ModeOpen || len(live) == 0 {
		for j, b := range bs {
			s.release(b, probes[j])
		}
		return s.degradeAll(ctx, ops, out)
	}
	sub, subOut := make([]core.Op, len(live)), make([]core.Result, len(live))
	for k, i := range live {
		sub[k] = ops[i]
	}
	if failed, err := s.callGroup(ctx, sub, subOut, ops, out, bs, probes); failed {
		return err
	}
	for j, b := range bs {
		if !slices.Contains(open, b) {
			s.succeed(b, probes[j])
		}
	}
	s.degraded.Add(1)
	for i := range out {
		out[i] = core.Result{Allowed: true, Source: core.FailedOpen}
	}
	for k, i := range live {
		out[i] = subOut[k]
	}
	if s.deny != nil {
		if now == 0 {
			now = s.mono()
		}
		s.deny.storeGroup(sub, subOut, now)
	}
	return nil
}

// Refund gives units back through the backend, through the circuit of
// a's node: while it is open the refund is dropped, and a refund that
// fails is dropped too (counted as a failure by the breaker and the
// Observers): the units stay consumed, which errs on the safe side. Errors
// that describe the call, or the end of the caller's context, are
// returned. a is dropped from the deny cache.
func (s *Store) Refund(ctx context.Context, a core.Admission) error {
	if s.deny != nil {
		s.deny.forget(a.Key)
	}
	b := s.nodeOf(a.Key)
	var now int64
	probe, ok := s.admit(b, &now)
	if !ok {
		return nil
	}
	cctx, cancel := s.bound(ctx)
	err := s.backend.Refund(cctx, a)
	cancel()
	switch {
	case err == nil:
		s.succeed(b, probe)
	case passThrough(ctx, err):
		s.release(b, probe)
		return err
	default:
		s.report(err)
		s.fail(b, err, probe)
	}
	return nil
}

// Reset forgets k in the backend, the deny cache and the fallback
// limiter. Unlike decisions, a failed Reset is returned: an operator asked
// for it.
func (s *Store) Reset(ctx context.Context, k core.Key, l core.Limit) error {
	if s.deny != nil {
		s.deny.forget(k)
	}
	if s.local != nil {
		if err := s.local.Reset(ctx, k, s.divide(l)); err != nil {
			return fmt.Errorf("guard: Reset: fallback: %w", err)
		}
	}
	return s.backend.Reset(ctx, k, l)
}

// SetOverride sets an override in the backend and, so that it holds while
// the backend fails, in the fallback limiter (its limit divided as every
// limit there is), and drops k from the deny cache. Like Reset, a failure
// is returned.
func (s *Store) SetOverride(ctx context.Context, k core.Key, o core.Override) error {
	if err := s.backend.SetOverride(ctx, k, o); err != nil {
		return err
	}
	if s.deny != nil {
		s.deny.forget(k)
	}
	if s.local != nil {
		if !o.Blocks() {
			o.Limit = s.divide(o.Limit)
		}
		if err := s.local.SetOverride(ctx, k, o); err != nil {
			return fmt.Errorf("guard: SetOverride: fallback: %w", err)
		}
	}
	return nil
}

// ClearOverride clears an override in the backend and the fallback
// limiter, and drops k from the deny cache.
func (s *Store) ClearOverride(ctx context.Context, k core.Key) error {
	if err := s.backend.ClearOverride(ctx, k); err != nil {
		return err
	}
	if s.deny != nil {
		s.deny.forget(k)
	}
	if s.local != nil {
		if err := s.local.ClearOverride(ctx, k); err != nil {
			return fmt.Errorf("guard: ClearOverride: fallback: %w", err)
		}
	}
	return nil
}

// bound returns the context of a backend call: ctx bounded by the
// timeout, or ctx as it is when the backend bounds the call itself within
// it (see Bounded).
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.bounded {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.cfg.timeout)
}

// passThrough reports whether err belongs to the caller rather than the
// backend: an invalid call, or the caller's own context ending.
func passThrough(ctx context.Context, err error) bool {
	return errors.Is(err, core.ErrInvalidLimit) || errors.Is(err, core.ErrInvalidCost) ||
		errors.Is(err, core.ErrNoKey) || ctx.Err() != nil
}

// deniedFor reports whether res is a denial worth caching: by the store,
// with a finite wait.
func deniedFor(res core.Result) bool {
	return !res.Allowed && res.Source == core.FromStore && res.RetryAfter > 0 && res.RetryAfter != core.RetryNever
}

// mono returns the monotonic nanoseconds since the Store was built, plus
// one so that 0 can mean "not read yet".
func (s *Store) mono() int64 { return int64(s.cfg.clock().Sub(s.epoch)) + 1 }

var _ core.Store = (*Store)(nil)
