// Package redisbench holds the Redis rate-limiter benchmark shared by the go
// test benchmarks of module github.com/sluicehq/sluice/bench and by its
// report program (cmd/report): many concurrent callers taking decisions on
// one local redis-server, for sluice's redisstore (every algorithm, with and
// without automatic pipelining), its peers, a raw EVALSHA yardstick and the
// ceiling redis-benchmark reaches on the same server; and the memory each
// implementation's state takes in redis-server per identity (RunMemory).
package redisbench

import (
	"context"
	"fmt"
	"time"

	redisrate "github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/throttled/throttled/v2"
	throttledredis "github.com/throttled/throttled/v2/store/goredisstore.v9"
	ulule "github.com/ulule/limiter/v3"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"
)

// Defaults of the scenario.
const (
	// Callers is the number of concurrent callers (goroutines).
	Callers = 64
	// Identities is the number of distinct keys the callers spread over.
	Identities = 1000
	// Rate is the limit, per second, of every implementation in the
	// throughput scenario: high enough that no decision is ever denied (see
	// SluiceLimit for the one exception).
	Rate = 1_000_000
)

// Quota is the limit an implementation is built with: N events per Period,
// with a burst of N for the bucket algorithms.
type Quota struct {
	N      int64
	Period time.Duration
}

// String returns "N/Period", e.g. "1000000/1s".
func (q Quota) String() string { return fmt.Sprintf("%d/%s", q.N, q.Period) }

var (
	// ThroughputQuota is the limit of the throughput scenario: Rate per
	// second, never reached.
	ThroughputQuota = Quota{N: Rate, Period: time.Second}
	// MemoryQuota is the limit of the memory scenario: 60 per hour, a
	// realistic API quota whose state, after one decision, lives for a
	// minute (a bucket refills one token in Period/N) or more (a window lasts
	// Period), well past the end of a run.
	MemoryQuota = Quota{N: 60, Period: time.Hour}
)

// Decider takes one rate-limit decision of cost 1 for key.
type Decider interface {
	Decide(ctx context.Context, key string) (allowed bool, err error)
}

// Kind says what an implementation is in the comparison.
type Kind uint8

const (
	Sluice    Kind = iota // a sluice redisstore variant
	Peer                  // another Go rate limiter on Redis
	Yardstick             // raw go-redis EVALSHA of a small script
	Ceiling               // redis-benchmark running the same small script
)

// Impl is one implementation under comparison.
type Impl struct {
	// Name is the sub-benchmark and -impls name.
	Name string
	// Module is the module whose version the report prints ("" for none).
	Module string
	Kind   Kind
	// Algorithm is what one decision computes, for the report.
	Algorithm string
	// New returns a Decider on client configured to q (not for Ceiling).
	New func(client *redis.Client, q Quota) (Decider, error)
	// Pipeline is redis-benchmark's -P (Ceiling only).
	Pipeline int
}

// Impls returns the sluice variants (each algorithm pipelined, then
// unpipelined), the peers, the yardstick and the two ceilings, in report
// order.
func Impls() []Impl {
	var out []Impl
	for a := core.TokenBucket; a <= core.GCRA; a++ {
		for _, pipelined := range []bool{true, false} {
			name := "sluice-" + a.String()
			if !pipelined {
				name += "-nopipe"
			}
			out = append(out, Impl{Name: name, Module: "github.com/sluicehq/sluice", Kind: Sluice,
				Algorithm: SluiceLimit(a, ThroughputQuota).String(), New: newSluice(a, pipelined)})
		}
	}
	return append(out,
		Impl{Name: "ulule", Module: "github.com/ulule/limiter/v3", Kind: Peer,
			Algorithm: fmt.Sprintf("fixed window %d/s (INCRBY+PEXPIRE script)", Rate), New: newUlule},
		Impl{Name: "redis_rate", Module: "github.com/go-redis/redis_rate/v10", Kind: Peer,
			Algorithm: fmt.Sprintf("GCRA %d/s burst %d", Rate, Rate), New: newRedisRate},
		Impl{Name: "throttled", Module: "github.com/throttled/throttled/v2", Kind: Peer,
			Algorithm: fmt.Sprintf("GCRA %d/s burst %d (TIME+GET pipeline, then a compare-and-swap EVAL)", Rate, Rate), New: newThrottled},
		Impl{Name: "evalsha", Module: "github.com/redis/go-redis/v9", Kind: Yardstick,
			Algorithm: "GET + SET PX script, 5 integers back", New: newRaw},
		Impl{Name: "redis-benchmark", Kind: Ceiling, Algorithm: "the same script, C client, -c 64", Pipeline: 1},
		Impl{Name: "redis-benchmark-P16", Kind: Ceiling, Algorithm: "the same script, C client, -c 64 -P 16", Pipeline: 16},
	)
}

// SluiceLimit is sluice's limit for algorithm a and quota q, except that the
// sliding window log, which keeps one entry per admitted request, is capped
// at core.MaxLogRate (65536) per period. With ThroughputQuota no decision is
// denied at the request rates a local Redis sustains.
func SluiceLimit(a core.Algorithm, q Quota) core.Limit {
	n := q.N
	if a == core.SlidingWindowLog {
		n = min(n, core.MaxLogRate)
	}
	return core.Per(n, q.Period).WithAlgorithm(a)
}

// NewClient returns the go-redis client every Go implementation gets: a
// pool big enough for every caller, and context deadlines honoured on the
// socket (sluice needs no extra goroutine per call then).
func NewClient(addr string, callers int) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                  addr,
		PoolSize:              callers + 16,
		ContextTimeoutEnabled: true,
	})
}

// sluice: redisstore.Store.Take. Its per-call timeout is raised from the
// default 50ms to 1s so that a stall of a loaded machine does not fail a run;
// the code path is the same (a context with a deadline per call).

type sluiceDecider struct {
	st  *redisstore.Store
	lim core.Limit
}

func newSluice(a core.Algorithm, pipelined bool) func(*redis.Client, Quota) (Decider, error) {
	return func(c *redis.Client, q Quota) (Decider, error) {
		opts := []redisstore.Option{redisstore.WithTimeout(time.Second)}
		if !pipelined {
			opts = append(opts, redisstore.WithPipelining(0, 0))
		}
		st, err := redisstore.New(c, opts...)
		if err != nil {
			return nil, err
		}
		return &sluiceDecider{st: st, lim: SluiceLimit(a, q)}, nil
	}
}

func (d *sluiceDecider) Decide(ctx context.Context, key string) (bool, error) {
	ops := [1]core.Op{{Key: core.Key{Identity: key}, Limit: d.lim, Cost: 1}}
	var out [1]core.Result
	err := d.st.Take(ctx, ops[:], out[:])
	return out[0].Allowed, err
}

// ulule: github.com/ulule/limiter/v3 with drivers/store/redis (a fixed
// window: one INCRBY+PEXPIRE script by EVALSHA), Limiter.Get.

type ululeDecider struct{ lim *ulule.Limiter }

func newUlule(c *redis.Client, q Quota) (Decider, error) {
	st, err := ululeredis.NewStoreWithOptions(c, ulule.StoreOptions{Prefix: ulule.DefaultPrefix, MaxRetry: ulule.DefaultMaxRetry})
	if err != nil {
		return nil, err
	}
	return &ululeDecider{lim: ulule.New(st, ulule.Rate{Period: q.Period, Limit: q.N})}, nil
}

func (d *ululeDecider) Decide(ctx context.Context, key string) (bool, error) {
	r, err := d.lim.Get(ctx, key)
	return !r.Reached, err
}

// redis_rate: github.com/go-redis/redis_rate/v10, GCRA, Limiter.Allow.

type redisRateDecider struct {
	lim   *redisrate.Limiter
	limit redisrate.Limit
}

func newRedisRate(c *redis.Client, q Quota) (Decider, error) {
	n := int(q.N)
	return &redisRateDecider{lim: redisrate.NewLimiter(c), limit: redisrate.Limit{Rate: n, Burst: n, Period: q.Period}}, nil
}

func (d *redisRateDecider) Decide(ctx context.Context, key string) (bool, error) {
	r, err := d.lim.Allow(ctx, key, d.limit)
	if err != nil {
		return false, err
	}
	return r.Allowed > 0, nil
}

// throttled: github.com/throttled/throttled/v2, its GCRA rate limiter on
// store/goredisstore.v9 (the go-redis v9 store) with key prefix
// "throttled:". A decision is a pipeline of TIME and GET, then an EVAL
// (the script's text every time) of a compare-and-swap script, or SETNX and
// EXPIRE for a new key: two or three round trips. A compare-and-swap lost to
// a concurrent caller is retried, up to 10 times, and then is an error.

type throttledDecider struct{ lim *throttled.GCRARateLimiterCtx }

func newThrottled(c *redis.Client, q Quota) (Decider, error) {
	st, err := throttledredis.NewCtx(c, "throttled:")
	if err != nil {
		return nil, err
	}
	n := int(q.N)
	lim, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerDuration(n, q.Period), MaxBurst: n - 1})
	if err != nil {
		return nil, err
	}
	return &throttledDecider{lim: lim}, nil
}

func (d *throttledDecider) Decide(ctx context.Context, key string) (bool, error) {
	limited, _, err := d.lim.RateLimitCtx(ctx, key, 1)
	return !limited, err
}

// evalsha: the yardstick. One go-redis Script.Run (EVALSHA, EVAL on
// NOSCRIPT) per decision of a small script that reads and writes a string
// with an expiry and returns five integers, decoded as sluice decodes its
// replies. No limiter logic on the client side at all.

// RawScript is the yardstick's script, also run by redis-benchmark.
const RawScript = `local v = tonumber(redis.call('GET', KEYS[1]) or '0') + 1
redis.call('SET', KEYS[1], v, 'PX', 60000)
return {1, v, 0, 0, 0}`

var rawScript = redis.NewScript(RawScript)

type rawDecider struct{ c *redis.Client }

func newRaw(c *redis.Client, _ Quota) (Decider, error) { return rawDecider{c}, nil }

func (d rawDecider) Decide(ctx context.Context, key string) (bool, error) {
	res, err := rawScript.Run(ctx, d.c, []string{key}).Int64Slice()
	if err != nil {
		return false, err
	}
	if len(res) != 5 {
		return false, fmt.Errorf("evalsha: unexpected reply %v", res)
	}
	return res[0] == 1, nil
}
