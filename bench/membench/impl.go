// Package membench holds the in-memory rate-limiter benchmarks shared by the
// go test benchmarks of module github.com/sluicehq/sluice/bench and by its
// report program (cmd/report): the implementations under comparison, adapted
// to one small interface and configured to the same limit, and the scenario
// functions that measure them.
package membench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	sethvargo "github.com/sethvargo/go-limiter"
	sethmem "github.com/sethvargo/go-limiter/memorystore"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/throttled/throttled/v2"
	throttledmem "github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ululemem "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"
)

// The limit every implementation is configured with: Rate events per Period,
// with a burst (bucket capacity or window size) of Rate.
const (
	Rate   = 1000
	Period = time.Second
)

// Limiter is the face every implementation is adapted to: one decision of
// cost 1 for key at the shared limit.
type Limiter interface {
	// Allow reports whether one more event for key is admitted now. A
	// backend error is a harness bug: the adapters panic on it.
	Allow(key string) bool
	// Close releases the limiter's background goroutines, if it can.
	Close() error
}

// Lener is implemented by the limiters that can count their live keys; the
// heap scenario uses it to check that every inserted key is still resident.
type Lener interface {
	Len() int
}

// Failer is implemented by the limiters whose decisions can fail without
// deciding: throttled's GCRA gives up (with an error, a 500 in its HTTP
// middleware) after losing its compare-and-swap on a key 10 times in a row,
// which two goroutines racing on one key make happen within the first
// burst. Such a decision took nothing from the key: it is neither an
// admission nor a denial (Allow reports it as not admitted).
type Failer interface {
	// Failures returns how many decisions have failed so far.
	Failures() int64
}

// Config tunes the construction of a Limiter.
type Config struct {
	// NoCleanup disables background expiry (sweepers, cleaners), so that every
	// inserted key stays resident while it is measured. The throughput
	// scenarios leave it false: each library runs with its defaults.
	NoCleanup bool
}

// Impl is one implementation under comparison.
type Impl struct {
	// Name is the sub-benchmark name: sluice, xrate, sethvargo, ulule or
	// throttled.
	Name string
	// Module is the module path whose version the report prints.
	Module string
	// Peer is false for sluice itself.
	Peer bool
	// New returns a fresh, empty limiter.
	New func(Config) (Limiter, error)
}

// Impls returns sluice followed by the peers, in a fixed order.
func Impls() []Impl {
	return []Impl{
		{Name: "sluice", Module: "github.com/sluicehq/sluice", New: newSluice},
		{Name: "xrate", Module: "golang.org/x/time", Peer: true, New: newXRate},
		{Name: "sethvargo", Module: "github.com/sethvargo/go-limiter", Peer: true, New: newSethvargo},
		{Name: "ulule", Module: "github.com/ulule/limiter/v3", Peer: true, New: newUlule},
		{Name: "throttled", Module: "github.com/throttled/throttled/v2", Peer: true, New: newThrottled},
	}
}

// sluice: memorystore.Store.Take with a token bucket of Rate per Period.

type sluiceLimiter struct {
	st  *memorystore.Store
	lim core.Limit
	ctx context.Context
}

func newSluice(c Config) (Limiter, error) {
	opts := []memorystore.Option{memorystore.WithMaxKeys(MaxKeys)}
	if c.NoCleanup {
		opts = append(opts, memorystore.WithSweepInterval(0))
	}
	st, err := memorystore.New(opts...)
	if err != nil {
		return nil, err
	}
	return &sluiceLimiter{st: st, lim: core.Per(Rate, Period), ctx: context.Background()}, nil
}

func (l *sluiceLimiter) Allow(key string) bool {
	allowed, err := takeOne(l.ctx, l.st, key, l.lim, 1)
	if err != nil {
		panic(fmt.Sprintf("sluice: Take: %v", err))
	}
	return allowed
}

// takeOne is a Take of one op, cost units of key (an identity without a
// policy) under l, reporting whether it was admitted. Its op and result
// stay on the stack (the memory store keeps neither), and only Allowed is
// copied out of the Result. The op's fields are set in place: a composite
// literal is built in a temporary and copied, 16 bytes at a time, out of
// the 8-byte stores that just wrote it, which the CPU cannot forward (about
// 5 ns of the decision's 90 on an AMD EPYC).
func takeOne(ctx context.Context, s *memorystore.Store, key string, l core.Limit, cost int64) (bool, error) {
	var ops [1]core.Op
	op := &ops[0]
	op.Key.Identity, op.Limit, op.Cost = key, l, cost
	var out [1]core.Result
	err := s.Take(ctx, ops[:], out[:])
	return out[0].Allowed, err
}

func (l *sluiceLimiter) Close() error { return l.st.Close() }

func (l *sluiceLimiter) Len() int { return l.st.Len() }

// xrate: golang.org/x/time/rate the way web frameworks use it (Echo's
// RateLimiterMemoryStore): a mutex-protected map of *rate.Limiter created on
// first use; the decision itself is taken after the map lock is released,
// under the limiter's own lock.

type xrateLimiter struct {
	mu sync.Mutex
	m  map[string]*rate.Limiter
}

func newXRate(Config) (Limiter, error) {
	return &xrateLimiter{m: make(map[string]*rate.Limiter)}, nil
}

func (l *xrateLimiter) Allow(key string) bool {
	l.mu.Lock()
	lim, ok := l.m[key]
	if !ok {
		lim = rate.NewLimiter(rate.Limit(Rate/Period.Seconds()), Rate)
		l.m[key] = lim
	}
	l.mu.Unlock()
	return lim.Allow()
}

func (l *xrateLimiter) Close() error { return nil }

func (l *xrateLimiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}

// sethvargo: github.com/sethvargo/go-limiter/memorystore, Tokens Rate per
// Interval Period. Its sweeper runs every 6 hours by default, so NoCleanup
// changes nothing.

type sethvargoLimiter struct {
	st  sethvargo.Store
	ctx context.Context
}

func newSethvargo(Config) (Limiter, error) {
	st, err := sethmem.New(&sethmem.Config{Tokens: Rate, Interval: Period})
	if err != nil {
		return nil, err
	}
	return &sethvargoLimiter{st: st, ctx: context.Background()}, nil
}

func (l *sethvargoLimiter) Allow(key string) bool {
	_, _, _, ok, err := l.st.Take(l.ctx, key)
	if err != nil {
		panic(fmt.Sprintf("sethvargo: Take: %v", err))
	}
	return ok
}

func (l *sethvargoLimiter) Close() error { return l.st.Close(l.ctx) }

// ulule: github.com/ulule/limiter/v3 with drivers/store/memory, a fixed
// window of Rate per Period. Its default cleaner runs every 30 seconds and
// can only be stopped by the garbage collector (a finalizer), so Close is a
// no-op; NoCleanup disables the cleaner.

type ululeLimiter struct {
	lim *ulule.Limiter
	ctx context.Context
}

func newUlule(c Config) (Limiter, error) {
	opts := ulule.StoreOptions{Prefix: ulule.DefaultPrefix, CleanUpInterval: ulule.DefaultCleanUpInterval}
	if c.NoCleanup {
		opts.CleanUpInterval = 0
	}
	st := ululemem.NewStoreWithOptions(opts)
	return &ululeLimiter{lim: ulule.New(st, ulule.Rate{Period: Period, Limit: Rate}), ctx: context.Background()}, nil
}

func (l *ululeLimiter) Allow(key string) bool {
	res, err := l.lim.Get(l.ctx, key)
	if err != nil {
		panic(fmt.Sprintf("ulule: Get: %v", err))
	}
	return !res.Reached
}

func (l *ululeLimiter) Close() error { return nil }

// throttled: github.com/throttled/throttled/v2, its GCRA rate limiter on
// store/memstore bounded like sluice's store (an LRU of MaxKeys keys, the
// configuration its README shows; unbounded it is a plain map), burst Rate.
// It has no background cleanup, so NoCleanup changes nothing.
//
// Its GCRA retries a lost compare-and-swap up to 10 times and then returns
// an error; Allow reports that as not admitted rather than a harness bug,
// and counts it in Failures (see Failer).

// MaxKeys bounds the key count of the limiters that take a bound (sluice and
// throttled), far above what a scenario inserts.
const MaxKeys = 4 << 20

type throttledLimiter struct {
	lim    *throttled.GCRARateLimiterCtx
	ctx    context.Context
	errors atomic.Int64
}

func newThrottled(Config) (Limiter, error) {
	st, err := throttledmem.NewCtx(MaxKeys)
	if err != nil {
		return nil, err
	}
	lim, err := throttled.NewGCRARateLimiterCtx(st, ThrottledQuota(Rate, Period))
	if err != nil {
		return nil, err
	}
	return &throttledLimiter{lim: lim, ctx: context.Background()}, nil
}

// ThrottledQuota is throttled's quota for n events per period with a burst
// of n: its GCRA admits MaxBurst+1 at once.
func ThrottledQuota(n int, period time.Duration) throttled.RateQuota {
	return throttled.RateQuota{MaxRate: throttled.PerDuration(n, period), MaxBurst: n - 1}
}

func (l *throttledLimiter) Allow(key string) bool {
	limited, _, err := l.lim.RateLimitCtx(l.ctx, key, 1)
	if err != nil {
		l.errors.Add(1)
		return false
	}
	return !limited
}

func (l *throttledLimiter) Close() error { return nil }

// Failures returns the number of decisions that failed (lost races).
func (l *throttledLimiter) Failures() int64 { return l.errors.Load() }
