package redisstore

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/algo"
	"github.com/sluicehq/sluice/lua"
)

// Store is the Redis core.Store. Build one with New; it is safe for
// concurrent use and holds no goroutine while idle. Close does not close the
// client, which the caller owns.
type Store struct {
	client  redis.UniversalClient
	prefix  string
	timeout time.Duration
	th      core.Thresholds
	clock   func() time.Time
	scripts [core.GCRA + 1]*redis.Script
	specs   [16]atomic.Pointer[compiled]
	batch   *batcher
	closed  atomic.Bool
	// deadlines: the client honours context deadlines on its sockets.
	deadlines bool
}

// compiled is a Spec with its script arguments prepared.
type compiled struct {
	sp   algo.Spec
	args []string
}

type config struct {
	prefix   string
	timeout  time.Duration
	th       core.Thresholds
	clock    func() time.Time
	inflight int
	maxBatch int
}

// Option configures a Store.
type Option func(*config)

// WithPrefix sets the first segment of every key (default "sluice"). It must
// not contain braces.
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithTimeout bounds every call, queueing included (default 50ms). A call
// that times out returns an error wrapping context.DeadlineExceeded. The
// bound holds whatever the client's settings; with ContextTimeoutEnabled set
// on the client a call needs no extra goroutine to enforce it.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithThresholds sets the warning-state thresholds (default 0.8 and 0.7).
// Every instance sharing the keys must use the same ones.
func WithThresholds(th core.Thresholds) Option { return func(c *config) { c.th = th } }

// WithClock makes the scripts use the caller's clock instead of Redis TIME.
// Meant for tests and simulations: instances with skewed clocks would not
// agree. Expiries are absolute, so the clock must not run behind Redis's.
func WithClock(now func() time.Time) Option { return func(c *config) { c.clock = now } }

// WithPipelining sets how many pipelines may be in flight at once (default
// 2) and how many decisions one pipeline carries at most (default 256).
// WithPipelining(0, 0) sends every decision on its own.
func WithPipelining(inflight, maxBatch int) Option {
	return func(c *config) { c.inflight, c.maxBatch = inflight, maxBatch }
}

// New returns a Store on client. It does not contact Redis: scripts are
// loaded on first use.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	c := config{prefix: "sluice", timeout: 50 * time.Millisecond, inflight: 2, maxBatch: 256}
	for _, o := range opts {
		o(&c)
	}
	switch {
	case client == nil:
		return nil, errors.New("redisstore: nil client")
	case c.prefix == "" || strings.ContainsAny(c.prefix, "{}"):
		return nil, fmt.Errorf("redisstore: WithPrefix: must be non-empty and free of braces, got %q", c.prefix)
	case c.timeout <= 0:
		return nil, fmt.Errorf("redisstore: WithTimeout: must be positive, got %s", c.timeout)
	case c.inflight < 0 || c.maxBatch < 0 || (c.inflight > 0) != (c.maxBatch > 0):
		return nil, fmt.Errorf("redisstore: WithPipelining: want both positive or both zero, got %d, %d", c.inflight, c.maxBatch)
	}
	if err := c.th.Validate(); err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	s := &Store{client: client, prefix: c.prefix, timeout: c.timeout, th: c.th, clock: c.clock, deadlines: honoursDeadlines(client)}
	for a := core.TokenBucket; a <= core.GCRA; a++ {
		s.scripts[a] = redis.NewScript(lua.Source(a))
	}
	if c.inflight > 0 {
		s.batch = &batcher{s: s, maxActive: c.inflight, maxBatch: c.maxBatch}
	}
	return s, nil
}

// Close makes later calls fail with core.ErrClosed. Calls in flight finish.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}

// Take decides one request for key under l; see core.Store.
func (s *Store) Take(ctx context.Context, key string, l core.Limit, cost int64) (core.Result, error) {
	cp, err := s.prepare(key, l, cost)
	if err != nil {
		return core.Result{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	c := &call{script: s.scripts[l.Algorithm], key: s.Key(key, l.Algorithm), args: s.args(cp, cost)}
	if s.batch != nil {
		err = s.batch.do(ctx, c)
	} else {
		c.done = make(chan struct{})
		go func() {
			c.res, c.err = s.eval(ctx, c)
			close(c.done)
		}()
		err = c.wait(ctx)
	}
	if err != nil {
		return core.Result{}, fmt.Errorf("redisstore: %w", err)
	}
	o, err := outcome(c.res)
	if err != nil {
		return core.Result{}, fmt.Errorf("redisstore: %w", err)
	}
	return cp.sp.Result(&o), nil
}

// Reset deletes key's state under l.
func (s *Store) Reset(ctx context.Context, key string, l core.Limit) error {
	if _, err := s.prepare(key, l, 0); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := s.client.Del(ctx, s.Key(key, l.Algorithm)).Err(); err != nil {
		return fmt.Errorf("redisstore: reset: %w", err)
	}
	return nil
}

func (s *Store) prepare(key string, l core.Limit, cost int64) (*compiled, error) {
	switch {
	case s.closed.Load():
		return nil, fmt.Errorf("redisstore: %w", core.ErrClosed)
	case key == "":
		return nil, fmt.Errorf("redisstore: %w", core.ErrNoKey)
	case cost < 0:
		return nil, fmt.Errorf("redisstore: %w: %d", core.ErrInvalidCost, cost)
	}
	slot := &s.specs[(uint64(l.Rate)*31+uint64(l.Period)*17+uint64(l.Burst)*7+uint64(l.Algorithm))%uint64(len(s.specs))]
	if cp := slot.Load(); cp != nil && cp.sp.Limit == l {
		return cp, nil
	}
	sp, err := algo.Compile(l, s.th)
	if err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	cp := &compiled{sp: sp, args: scriptArgs(&sp)}
	slot.Store(cp)
	return cp, nil
}

// scriptArgs returns ARGV[3:] of the limit's script (see lua/*.lua).
func scriptArgs(sp *algo.Spec) []string {
	var n []int64
	switch sp.Algorithm {
	case core.FixedWindow, core.SlidingWindowLog:
		n = []int64{sp.Period, sp.Limit.Rate, sp.WarnAbove, sp.ClearBelow}
	case core.SlidingWindowCounter:
		n = []int64{sp.Period, sp.Limit.Rate, sp.Full, sp.WarnAbove, sp.ClearBelow}
	default:
		n = []int64{sp.Q, sp.T, sp.Full, sp.Capacity, sp.WarnAbove, sp.ClearBelow}
	}
	args := make([]string, len(n))
	for i, v := range n {
		args[i] = strconv.FormatInt(v, 10)
	}
	return args
}

func (s *Store) args(cp *compiled, cost int64) []any {
	now := int64(-1)
	if s.clock != nil {
		now = s.clock().UnixMicro()
	}
	args := make([]any, 2, 2+len(cp.args))
	args[0], args[1] = now, cost
	for _, a := range cp.args {
		args = append(args, a)
	}
	return args
}

// outcome decodes a script's reply {allowed, remaining, retry, reset, level,
// previous level}.
func outcome(res []int64) (algo.Outcome, error) {
	if len(res) != 6 || res[4] < 0 || res[4] > 2 || res[5] < 0 || res[5] > 2 {
		return algo.Outcome{}, fmt.Errorf("unexpected script reply %v", res)
	}
	return algo.Outcome{Allowed: res[0] == 1, Remaining: res[1], Retry: res[2], Reset: res[3], Level: core.State(res[4]), Prev: core.State(res[5])}, nil
}

// maxRawKey is the longest key stored as is; longer keys are hashed.
const maxRawKey = 200

var algoCode = [...]string{core.TokenBucket: "tb", core.LeakyBucket: "lb", core.FixedWindow: "fw", core.SlidingWindowLog: "sl", core.SlidingWindowCounter: "sc", core.GCRA: "gc"}

// Key returns the Redis key that holds key's state under algorithm a. A key
// "identity\x00policy", as the Limiter builds them, becomes
// "<prefix>:{identity}:policy:<algorithm>": only the identity is in the hash
// tag, so every policy of one identity shares a Cluster slot.
func (s *Store) Key(key string, a core.Algorithm) string {
	id, policy := key, ""
	if i := strings.LastIndexByte(key, 0); i >= 0 {
		id, policy = key[:i], key[i+1:]
	}
	k := s.prefix + ":{" + tag(id) + "}:"
	if policy != "" {
		k += tag(policy) + ":"
	}
	return k + algoCode[a]
}

// tag makes key safe inside a hash tag: braces and "%" percent-escaped, and a
// key longer than maxRawKey replaced by "#" and its SHA-256.
func tag(key string) string {
	if len(key) > maxRawKey {
		sum := sha256.Sum256([]byte(key))
		return "#" + base64.RawURLEncoding.EncodeToString(sum[:16])
	}
	if !strings.ContainsAny(key, "{}%#") {
		return key
	}
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		switch c := key[i]; c {
		case '{', '}', '%', '#':
			fmt.Fprintf(&b, "%%%02X", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
