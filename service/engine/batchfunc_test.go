package engine_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rules"
)

// answered is what CheckBatchFunc handed over for one check, copied out of
// the memory it reuses.
type answered struct {
	calls   int
	res     engine.Result
	results []core.PolicyResult
	err     error
}

// collect decides cs with CheckBatchFunc and returns every check's answer,
// copied while answer runs.
func collect(ctx context.Context, e *engine.Engine, cs []engine.Check, aon bool) []answered {
	got := make([]answered, len(cs))
	e.CheckBatchFunc(ctx, cs, aon, func(i int, r *engine.Result, err error) {
		a := &got[i]
		a.calls++
		a.err = err
		if r != nil {
			a.res = *r
			a.results = append([]core.PolicyResult(nil), r.Decision.Results...)
			a.res.Decision = core.Decision{}
		}
	})
	return got
}

// TestCheckBatchFuncIsCheckBatch: CheckBatchFunc answers every check once,
// with what CheckBatch returns for it (the same Result, its Decision's
// results, the same error), for batches that mix callers repeated and
// not, invalid checks, Deny rules (shadow or not), peeks and checks no
// rule applies to, one by one (in order and in rounds) and all or
// nothing. The two engines decide on stores of one clock, batch after
// batch, so each batch finds the same counters on both.
func TestCheckBatchFuncIsCheckBatch(t *testing.T) {
	ctx := context.Background()
	clock := &fixedClock{now: time.Unix(1_700_000_000, 0)}
	newPair := func(t *testing.T, opts ...engine.Option) (*engine.Engine, *engine.Engine) {
		pair := [2]*engine.Engine{}
		for k := range pair {
			s, err := memorystore.New(memorystore.WithClock(clock.Now))
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			pair[k], err = engine.New(ctx, s, newSource(nativeDeny(t)), append([]engine.Option{engine.WithClock(clock.Now)}, opts...)...)
			require.NoError(t, err)
		}
		return pair[0], pair[1]
	}
	user := func(id, endpoint string, cost int64) engine.Check {
		return engine.Check{Dimension: "user", Identifier: id, Endpoint: endpoint, Cost: cost}
	}
	batches := [][]engine.Check{
		{user("a", "/orders", 1), user("b", "/orders", 2), user("a", "/orders", 1), user("c", "/orders", 0)},
		{user("a", "/orders", 3), user("a", "/admin/x", 1), user("b", "/beta", 1), {Dimension: "ip", Identifier: "10.0.0.1", Cost: 1}},
		{user("a", "/orders", 1), {Dimension: "user", Cost: 1}, user("b", "/orders", 1)},
		{user("d", "/orders", 1), {Dimension: "nobody", Identifier: "x", Cost: 1}, user("d", "/orders", 9)},
		{user("e", "/orders", 1), {Dimension: "user", Identifier: "e", Rule: "no-such-rule", Cost: 1}},
	}
	for _, c := range []struct {
		name string
		opts []engine.Option
	}{{"in order", nil}, {"rounds", []engine.Option{engine.WithBatchParallelism(4)}}} {
		for _, aon := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/all_or_nothing=%v", c.name, aon), func(t *testing.T) {
				plain, byFunc := newPair(t, c.opts...)
				for b, cs := range batches {
					rs, errs := plain.CheckBatch(ctx, cs, aon)
					got := collect(ctx, byFunc, cs, aon)
					for i := range cs {
						a := &got[i]
						require.Equal(t, 1, a.calls, "batch %d check %d: answered once", b, i)
						if errs[i] != nil {
							require.EqualError(t, a.err, errs[i].Error(), "batch %d check %d", b, i)
							continue
						}
						require.NoError(t, a.err, "batch %d check %d", b, i)
						want := rs[i]
						results := want.Decision.Results
						want.Decision = core.Decision{}
						require.Equal(t, want, a.res, "batch %d check %d", b, i)
						require.Equal(t, len(results), len(a.results), "batch %d check %d", b, i)
						for j := range results {
							require.Equal(t, results[j].Policy, a.results[j].Policy)
							require.Equal(t, results[j].Result, a.results[j].Result, "batch %d check %d result %d", b, i, j)
						}
					}
				}
			})
		}
	}
}

// countingObserver reads every decision it is told of, as the service's
// metrics do.
type countingObserver struct{ allowed, results int }

func (o *countingObserver) Decided(_ context.Context, ev *engine.Event) {
	if ev.Decision != nil {
		o.results += len(ev.Decision.Results)
		if ev.Decision.Allowed {
			o.allowed++
		}
	}
}

func (o *countingObserver) Reloaded(*rules.Snapshot, error) {}

// TestCheckBatchFuncAllocations pins what a batch of 100 checks of 100
// callers allocates in the engine on the memory store, observed, under a
// context that can be canceled (a gRPC call's): one object for the whole
// batch decided in order (the context the store calls run on), none per
// check, the decisions' results (two a check as well as one) and the
// answers all in pooled memory; all or nothing, a handful for the one
// decision of 100 ops.
func TestCheckBatchFuncAllocations(t *testing.T) {
	if raceBuild {
		t.Skip("the race detector drops pooled memory at random: make test runs this pin again without it (ALLOC_PINS)")
	}
	cs := make([]engine.Check, 100)
	for k := range cs {
		cs[k] = engine.Check{Dimension: "user", Identifier: "user-" + strconv.Itoa(k), Endpoint: "/api/orders", Cost: 1}
	}
	twoRules := benchRules + `
  - name: per-user-api
    dimension: user
    endpoints: [/api/orders]
    algorithm: fixed_window
    rate: 1000000000
    period: 1h
`
	for _, c := range []struct {
		name, rules string
		aon         bool
		max         float64
	}{
		{"in order", benchRules, false, 1},
		{"in order, two rules each", twoRules, false, 1},
		{"all or nothing", benchRules, true, 8},
	} {
		t.Run(c.name, func(t *testing.T) {
			obs := &countingObserver{}
			e := newEngine(t, memStore(t), c.rules, engine.WithObserver(obs))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ok := 0
			answer := func(_ int, r *engine.Result, err error) {
				if err == nil && r.Allowed && r.Rule != "" {
					ok++
				}
			}
			allocs := testing.AllocsPerRun(50, func() { e.CheckBatchFunc(ctx, cs, c.aon, answer) })
			require.LessOrEqual(t, allocs, c.max, "allocations of a batch of %d", len(cs))
			require.Equal(t, 51*len(cs), ok, "every check answered, allowed under a rule")
			require.Equal(t, 51*len(cs), obs.allowed, "every check observed")
		})
	}
}
