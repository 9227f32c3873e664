package leasebench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/bench/accuracy"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/algo"
	"github.com/sluicehq/sluice/core/lease"
	"github.com/sluicehq/sluice/core/memorystore"
)

// ParetoConfig sizes the many-identities scenario: the accuracy study's
// many-clients trace (clients of Pareto-distributed rates, see package
// accuracy) of Limit at Scale, each request sent to one of Instances
// lease layers at random, replayed on a manual clock.
type ParetoConfig struct {
	Limit     core.Limit // its Rate and Period; the algorithm is each run's
	Scale     accuracy.Scale
	Instances int
	Hold      time.Duration
	Seed      uint64
}

// DefaultPareto is the report's configuration.
var DefaultPareto = ParetoConfig{Limit: core.Per(100, time.Second), Scale: accuracy.Full, Instances: 4, Hold: 100 * time.Millisecond, Seed: 1}

// ParetoResult is one algorithm's replay.
type ParetoResult struct {
	Algorithm core.Algorithm
	Requests  int
	// Exact is what one store admitted deciding every request; Leased what
	// the lease layers admitted on the same requests.
	Exact, Leased int
	// StoreCalls are the calls the lease layers made to the store below
	// (takes, exact decisions and give-backs): Redis calls, with a Redis
	// store.
	StoreCalls uint64
	// Over is the leased admissions the algorithm, replayed on them, does
	// not admit: zero.
	Over int
}

// CallsPerDecision is the store calls per request.
func (r ParetoResult) CallsPerDecision() float64 { return float64(r.StoreCalls) / float64(r.Requests) }

// UnderAdmission is the share of the exact admissions the lease lost.
func (r ParetoResult) UnderAdmission() float64 { return float64(r.Exact-r.Leased) / float64(r.Exact) }

// RunPareto replays the trace under algorithm a, exactly and leased.
func RunPareto(ctx context.Context, a core.Algorithm, cfg ParetoConfig) (ParetoResult, error) {
	l := cfg.Limit.WithAlgorithm(a)
	traces, err := accuracy.Traces(l, cfg.Scale, cfg.Seed)
	if err != nil {
		return ParetoResult{}, err
	}
	var tr *accuracy.Trace
	for i := range traces {
		if traces[i].Name == "many-clients" {
			tr = &traces[i]
		}
	}
	if tr == nil {
		return ParetoResult{}, fmt.Errorf("no many-clients trace")
	}
	res := ParetoResult{Algorithm: a, Requests: len(tr.Requests)}
	if res.Exact, err = replayExact(ctx, tr, l); err != nil {
		return res, err
	}
	err = replayLeased(ctx, tr, l, cfg, &res)
	return res, err
}

// clock is a manual clock the replays set to each request's instant (the
// lease layers' sweepers read it too).
type clock struct{ us atomic.Int64 }

func (c *clock) Now() time.Time { return time.UnixMicro(c.us.Load()) }

func (c *clock) set(us int64) { c.us.Store(us) }

func replayExact(ctx context.Context, tr *accuracy.Trace, l core.Limit) (int, error) {
	c := &clock{}
	c.set(tr.Start)
	mem, err := memorystore.New(memorystore.WithClock(c.Now), memorystore.WithSweepInterval(0))
	if err != nil {
		return 0, err
	}
	defer mem.Close()
	admitted := 0
	var out [1]core.Result
	for _, r := range tr.Requests {
		c.set(r.At)
		op := [1]core.Op{{Key: core.Key{Identity: strconv.Itoa(int(r.Client))}, Limit: l, Cost: 1}}
		if err := mem.Take(ctx, op[:], out[:]); err != nil {
			return 0, err
		}
		if out[0].Allowed {
			admitted++
		}
	}
	return admitted, nil
}

func replayLeased(ctx context.Context, tr *accuracy.Trace, l core.Limit, cfg ParetoConfig, res *ParetoResult) error {
	c := &clock{}
	c.set(tr.Start)
	mem, err := memorystore.New(memorystore.WithClock(c.Now), memorystore.WithSweepInterval(0))
	if err != nil {
		return err
	}
	defer mem.Close()
	insts := make([]*lease.Store, cfg.Instances)
	for i := range insts {
		if insts[i], err = lease.New(mem, lease.WithClock(c.Now), lease.WithSweepInterval(time.Hour)); err != nil {
			return err
		}
	}
	sp := algo.MustCompile(l)
	refs := make([]algo.State, tr.Clients)
	rng := rand.New(rand.NewPCG(cfg.Seed, 99))
	var out [1]core.Result
	for _, r := range tr.Requests {
		c.set(r.At)
		op := [1]core.Op{{Key: core.Key{Identity: strconv.Itoa(int(r.Client))}, Limit: l, Cost: 1, Lease: cfg.Hold}}
		if err := insts[rng.IntN(len(insts))].Take(ctx, op[:], out[:]); err != nil {
			return err
		}
		if out[0].Allowed {
			res.Leased++
			var o algo.Outcome
			if sp.Step(&refs[r.Client], &o, r.At, 1); !o.Allowed {
				res.Over++
			}
		}
	}
	for _, s := range insts {
		st := s.Stats()
		res.StoreCalls += st.Takes + st.PassedThrough + st.GivenBack
		if err := s.Close(); err != nil {
			return err
		}
	}
	return nil
}
