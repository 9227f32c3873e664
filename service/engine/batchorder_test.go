package engine_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/service/engine"
)

// batchOrderYAML: two rules of one caller on overlapping endpoints and one
// of another dimension, all with periods long enough that nothing frees
// up during the test (a log keeps every entry, a bucket refills one token
// in 6 minutes), so a sequential model is exact.
const batchOrderYAML = `
rules:
  - name: a-log
    dimension: user
    endpoints: [/a/**]
    algorithm: sliding_window_log
    rate: 6
    period: 1h
  - name: all-bucket
    dimension: user
    endpoints: [/**]
    algorithm: token_bucket
    rate: 10
    period: 1h
  - name: ip-log
    dimension: ip
    algorithm: sliding_window_log
    rate: 4
    period: 1h
`

// batchModel decides checks one after the other under batchOrderYAML.
type batchModel struct{ used map[string]int64 }

// rulesOf is the rules a check reaches, with their limits.
func rulesOf(c engine.Check) map[string]int64 {
	if c.Dimension == "ip" {
		return map[string]int64{"ip-log": 4}
	}
	if strings.HasPrefix(c.Endpoint, "/a/") {
		return map[string]int64{"a-log": 6, "all-bucket": 10}
	}
	return map[string]int64{"all-bucket": 10}
}

// decide returns whether c is allowed, all or nothing over its rules (a
// peek: whether one more unit fits), and counts it.
func (m *batchModel) decide(c engine.Check) bool {
	rs := rulesOf(c)
	ok := true
	for r, limit := range rs {
		ok = ok && m.used[r+"/"+c.Identifier]+max(c.Cost, 1) <= limit
	}
	if ok && c.Cost > 0 {
		for r := range rs {
			m.used[r+"/"+c.Identifier] += c.Cost
		}
	}
	return ok
}

// TestBatchInRequestOrder: plain (not all-or-nothing) batches with
// repeated callers, decided 8 at once, on the memory store and on a real
// redis-server: each counter's remaining never rises in request order, and
// the checks allowed are exactly those a sequential model allows.
func TestBatchInRequestOrder(t *testing.T) {
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			e := newEngine(t, newStore(t), batchOrderYAML, engine.WithBatchParallelism(8))
			seed := uint64(time.Now().UnixNano())
			r := rand.New(rand.NewPCG(seed, 3))
			endpoints := []string{"/a/x", "/a/y/z", "/b", "/"}
			for batch := range 40 {
				m := &batchModel{used: map[string]int64{}}
				cs := make([]engine.Check, 20+r.IntN(60))
				for i := range cs {
					c := engine.Check{Dimension: "user", Identifier: fmt.Sprintf("u%d-%d", batch, r.IntN(3)),
						Endpoint: endpoints[r.IntN(len(endpoints))], Cost: int64(r.IntN(4))}
					if r.IntN(4) == 0 {
						c.Dimension, c.Identifier = "ip", fmt.Sprintf("10.0.%d.%d", batch, r.IntN(2))
					}
					cs[i] = c
				}
				res, errs := e.CheckBatch(ctx, cs, false)
				last := map[string]int64{} // each counter's remaining at its latest check
				for i, c := range cs {
					where := fmt.Sprintf("seed %d batch %d check %d %+v", seed, batch, i, c)
					require.NoError(t, errs[i], where)
					require.Equal(t, m.decide(c), res[i].Allowed, "%s: allowed", where)
					for _, p := range res[i].Decision.Results {
						k := p.Policy + "/" + c.Identifier
						if prev, ok := last[k]; ok {
							require.LessOrEqual(t, p.Remaining, prev, "%s: %s has more left than at an earlier check", where, k)
						}
						last[k] = p.Remaining
					}
				}
			}
		})
	}
}

// TestBatchAllOrNothingPeekRefusesNothing: in an all-or-nothing batch, a
// check of cost 0 whose counter is spent takes nothing and refuses
// nothing: the batch is admitted, says so, and is counted; a batch whose
// take does not fit is refused and counts nothing, peek or not. On memory
// and on a real redis-server.
func TestBatchAllOrNothingPeekRefusesNothing(t *testing.T) {
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			e := newEngine(t, newStore(t), batchOrderYAML)
			mustCheck(t, e, engine.Check{Dimension: "ip", Identifier: "spent", Cost: 4})
			peek := engine.Check{Dimension: "ip", Identifier: "spent", Cost: 0}
			take := engine.Check{Dimension: "user", Identifier: "u", Endpoint: "/b", Cost: 2}
			rs, errs := e.CheckBatch(ctx, []engine.Check{peek, take}, true)
			require.Equal(t, []error{nil, nil}, errs)
			require.True(t, rs[0].Allowed, "the batch was counted: it is admitted")
			require.True(t, rs[1].Allowed)
			require.Zero(t, rs[0].Remaining, "the peek says its counter is spent")
			require.EqualValues(t, 8, rs[1].Remaining)
			require.EqualValues(t, 8, mustCheck(t, e, engine.Check{Dimension: "user", Identifier: "u", Endpoint: "/b", Cost: 0}).Remaining,
				"the admitted batch took 2")

			take.Cost = 20 // above the bucket's 10
			rs, errs = e.CheckBatch(ctx, []engine.Check{peek, take}, true)
			require.Equal(t, []error{nil, nil}, errs)
			require.False(t, rs[0].Allowed)
			require.False(t, rs[1].Allowed)
			require.EqualValues(t, 8, mustCheck(t, e, engine.Check{Dimension: "user", Identifier: "u", Endpoint: "/b", Cost: 0}).Remaining,
				"the refused batch took nothing")
		})
	}
}

// TestBatchRoundTrips: a plain batch on Redis, decided with parallelism
// (as ratelimitd decides batches over Redis), costs the server one call
// per round of its callers' checks, not one per check: 100 checks of 100
// callers one decideMany FCALL, 100 checks of 50 callers (two each) two,
// one after the other (the second of each caller sees the first's take);
// checks with an idempotency key beside them are decided on their own,
// and a retry of one is free.
func TestBatchRoundTrips(t *testing.T) {
	srv := redistest.StartServer(t)
	st := redisStore(t, srv.Addr)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { admin.Close() })
	ctx := context.Background()
	e := newEngine(t, st, batchOrderYAML, engine.WithBatchParallelism(16))
	mustCheck(t, e, engine.Check{Dimension: "user", Identifier: "warm", Endpoint: "/b", Cost: 1}) // loads the code
	batch := func(n, callers int) []engine.Check {
		cs := make([]engine.Check, n)
		for i := range cs {
			cs[i] = engine.Check{Dimension: "user", Identifier: fmt.Sprintf("rt%d-%d-%d", n, callers, i%callers), Endpoint: "/b", Cost: 1}
		}
		return cs
	}
	for _, c := range []struct{ n, callers, fcalls int }{{100, 100, 1}, {100, 50, 2}} {
		cs := batch(c.n, c.callers)
		before := redistest.CommandCalls(t, admin, "fcall")
		rs, errs := e.CheckBatch(ctx, cs, false)
		require.Equal(t, before+c.fcalls, redistest.CommandCalls(t, admin, "fcall"), "%d checks of %d callers", c.n, c.callers)
		for i := range cs {
			require.NoError(t, errs[i])
			require.True(t, rs[i].Allowed)
			require.EqualValues(t, 10-1-i/c.callers, rs[i].Remaining, "check %d: after the caller's earlier ones", i)
		}
	}
	cs := batch(20, 20)
	for i := range 5 {
		cs[i].IdempotencyKey = "k" + strconv.Itoa(i)
	}
	for range 2 {
		rs, errs := e.CheckBatch(ctx, cs, false)
		for i := range cs {
			require.NoError(t, errs[i])
			require.True(t, rs[i].Allowed)
		}
	}
	for i := range cs {
		r := mustCheck(t, e, engine.Check{Dimension: "user", Identifier: cs[i].Identifier, Endpoint: "/b", Cost: 0})
		want := int64(10 - 2)
		if i < 5 {
			want = 10 - 1 // the repeat was free
		}
		require.Equal(t, want, r.Remaining, "check %d", i)
	}
}
