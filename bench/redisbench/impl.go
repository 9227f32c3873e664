// Package redisbench holds the Redis rate-limiter benchmark shared by the go
// test benchmarks of module github.com/sluicehq/sluice/bench and by its
// report program (cmd/report): many concurrent callers taking decisions on
// one local redis-server, for sluice's redisstore (every algorithm, with and
// without automatic pipelining), its peers, a raw EVALSHA yardstick and the
// ceiling redis-benchmark reaches on the same server.
package redisbench

import (
	"context"
	"fmt"
	"time"

	redisrate "github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/redisstore"
	ulule "github.com/ulule/limiter/v3"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"
)

// Defaults of the scenario.
const (
	// Callers is the number of concurrent callers (goroutines).
	Callers = 64
	// Identities is the number of distinct keys the callers spread over.
	Identities = 1000
	// Rate is the limit, per second, of every implementation: high enough
	// that no decision is ever denied (see SluiceLimit for the one exception).
	Rate = 1_000_000
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
	// New returns a Decider on client (not for Ceiling).
	New func(client *redis.Client) (Decider, error)
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
				Algorithm: SluiceLimit(a).String(), New: newSluice(a, pipelined)})
		}
	}
	return append(out,
		Impl{Name: "ulule", Module: "github.com/ulule/limiter/v3", Kind: Peer,
			Algorithm: fmt.Sprintf("fixed window %d/s (INCRBY+PEXPIRE script)", Rate), New: newUlule},
		Impl{Name: "redis_rate", Module: "github.com/go-redis/redis_rate/v10", Kind: Peer,
			Algorithm: fmt.Sprintf("GCRA %d/s burst %d", Rate, Rate), New: newRedisRate},
		Impl{Name: "evalsha", Module: "github.com/redis/go-redis/v9", Kind: Yardstick,
			Algorithm: "GET + SET PX script, 5 integers back", New: newRaw},
		Impl{Name: "redis-benchmark", Kind: Ceiling, Algorithm: "the same script, C client, -c 64", Pipeline: 1},
		Impl{Name: "redis-benchmark-P16", Kind: Ceiling, Algorithm: "the same script, C client, -c 64 -P 16", Pipeline: 16},
	)
}

// SluiceLimit is sluice's limit for algorithm a: Rate per second, except the
// sliding window log, which keeps one entry per admitted request and is
// capped at core.MaxLogRate (65536) per period. No decision is denied at the
// request rates a local Redis sustains.
func SluiceLimit(a core.Algorithm) core.Limit {
	if a == core.SlidingWindowLog {
		return core.PerSecond(core.MaxLogRate).WithAlgorithm(a)
	}
	return core.PerSecond(Rate).WithAlgorithm(a)
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

func newSluice(a core.Algorithm, pipelined bool) func(*redis.Client) (Decider, error) {
	return func(c *redis.Client) (Decider, error) {
		opts := []redisstore.Option{redisstore.WithTimeout(time.Second)}
		if !pipelined {
			opts = append(opts, redisstore.WithPipelining(0, 0))
		}
		st, err := redisstore.New(c, opts...)
		if err != nil {
			return nil, err
		}
		return &sluiceDecider{st: st, lim: SluiceLimit(a)}, nil
	}
}

func (d *sluiceDecider) Decide(ctx context.Context, key string) (bool, error) {
	r, err := d.st.Take(ctx, key, d.lim, 1)
	return r.Allowed, err
}

// ulule: github.com/ulule/limiter/v3 with drivers/store/redis (a fixed
// window: one INCRBY+PEXPIRE script by EVALSHA), Limiter.Get.

type ululeDecider struct{ lim *ulule.Limiter }

func newUlule(c *redis.Client) (Decider, error) {
	st, err := ululeredis.NewStoreWithOptions(c, ulule.StoreOptions{Prefix: ulule.DefaultPrefix, MaxRetry: ulule.DefaultMaxRetry})
	if err != nil {
		return nil, err
	}
	return &ululeDecider{lim: ulule.New(st, ulule.Rate{Period: time.Second, Limit: Rate})}, nil
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

func newRedisRate(c *redis.Client) (Decider, error) {
	return &redisRateDecider{lim: redisrate.NewLimiter(c), limit: redisrate.PerSecond(Rate)}, nil
}

func (d *redisRateDecider) Decide(ctx context.Context, key string) (bool, error) {
	r, err := d.lim.Allow(ctx, key, d.limit)
	if err != nil {
		return false, err
	}
	return r.Allowed > 0, nil
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

func newRaw(c *redis.Client) (Decider, error) { return rawDecider{c}, nil }

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
