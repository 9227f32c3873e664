package engine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rules"
)

const twoRules = `
rules:
  - name: small
    dimension: user
    endpoints: [/api/**]
    algorithm: %s
    rate: 5
    period: 1h
    tiers:
      pro: {algorithm: %[1]s, rate: 50, period: 1h}
  - name: big
    dimension: user
    algorithm: %[1]s
    rate: 100
    period: 1h
tier_assignments:
  user: {alice: pro}
`

// remaining returns what rule has left in r's decision.
func remaining(t *testing.T, r engine.Result, rule string) int64 {
	t.Helper()
	for _, p := range r.Decision.Results {
		if p.Policy == rule {
			return p.Remaining
		}
	}
	t.Fatalf("rule %q not in the decision", rule)
	return 0
}

func TestFeatures(t *testing.T) {
	ctx := context.Background()
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			for _, a := range []core.Algorithm{core.TokenBucket, core.FixedWindow, core.SlidingWindowLog} {
				t.Run(a.String(), func(t *testing.T) {
					e := newEngine(t, newStore(t), fmt.Sprintf(twoRules, a))
					bob := engine.Check{Dimension: "user", Identifier: "bob", Endpoint: "/api/orders", Cost: 1}
					peek := bob
					peek.Cost = 0

					t.Run("batch", func(t *testing.T) {
						c := bob
						c.Identifier = "batch"
						bad := c
						bad.Identifier = ""
						rs, errs := e.CheckBatch(ctx, []engine.Check{c, bad, c}, false)
						require.NoError(t, errs[0])
						require.ErrorIs(t, errs[1], engine.ErrInvalid)
						require.NoError(t, errs[2])
						require.EqualValues(t, 4, rs[0].Remaining)
						require.EqualValues(t, 3, rs[2].Remaining)

						// All or nothing: 3 + 2 of the 3 left: denied, nothing
						// counted anywhere.
						other := c
						other.Identifier, other.Cost = "batch-2", 1
						c3, c2 := c, c
						c3.Cost, c2.Cost = 2, 2
						rs, errs = e.CheckBatch(ctx, []engine.Check{other, c3, c2}, true)
						for i := range errs {
							require.NoError(t, errs[i])
							require.False(t, rs[i].Allowed, "check %d", i)
						}
						require.Equal(t, "small", rs[1].Rule)
						r := mustCheck(t, e, engine.Check{Dimension: "user", Identifier: "batch-2", Endpoint: "/api/orders"})
						require.EqualValues(t, 5, r.Remaining, "a denied batch counted")
						require.EqualValues(t, 100-2, remaining(t, mustCheck(t, e, engine.Check{Dimension: "user", Identifier: "batch"}), "big"))

						// Within the limit: all counted, one counter for the
						// two checks of one identifier.
						c2.Cost = 1
						rs, errs = e.CheckBatch(ctx, []engine.Check{other, c3, c2}, true)
						for i := range errs {
							require.NoError(t, errs[i])
							require.True(t, rs[i].Allowed, "check %d", i)
						}
						require.EqualValues(t, 0, rs[1].Remaining)
						require.EqualValues(t, 4, rs[0].Remaining)

						// An invalid check: nothing decided.
						_, errs = e.CheckBatch(ctx, []engine.Check{other, bad}, true)
						var fe *core.FieldError
						require.True(t, errors.As(errs[0], &fe))
						require.Equal(t, "all_or_nothing", fe.Field)
						require.True(t, errors.As(errs[1], &fe))
						require.Equal(t, "identifier", fe.Field)
						require.EqualValues(t, 4, mustCheck(t, e, engine.Check{Dimension: "user", Identifier: "batch-2", Endpoint: "/api/orders"}).Remaining)
					})

					t.Run("report", func(t *testing.T) {
						c := bob
						c.Identifier, c.Cost = "reporter", 3
						r, err := e.Report(ctx, c)
						require.NoError(t, err)
						require.True(t, r.Allowed)
						require.EqualValues(t, 2, r.Remaining)
						// 4 more than the 2 left: small drains to zero, big is
						// charged in full, and the answer is a denial.
						c.Cost = 4
						r, err = e.Report(ctx, c)
						require.NoError(t, err)
						require.False(t, r.Allowed)
						require.Equal(t, "small", r.Rule)
						require.EqualValues(t, 0, r.Remaining)
						require.EqualValues(t, 5, r.Used)
						require.Positive(t, r.RetryAfter)
						require.EqualValues(t, 100-7, remaining(t, r, "big"))
						c.Cost = 1
						r = mustCheck(t, e, c)
						require.False(t, r.Allowed, "the check after a drained report passed")
					})

					t.Run("reset", func(t *testing.T) {
						c := bob
						c.Identifier, c.Cost = "resetter", 5
						require.True(t, mustCheck(t, e, c).Allowed)
						c.Cost = 1
						require.False(t, mustCheck(t, e, c).Allowed)
						require.NoError(t, e.Reset(ctx, c))
						r := mustCheck(t, e, c)
						require.True(t, r.Allowed)
						require.EqualValues(t, 4, r.Remaining)
						require.EqualValues(t, 99, remaining(t, r, "big"), "reset every matched rule")
						require.ErrorIs(t, e.Reset(ctx, engine.Check{Dimension: "user"}), engine.ErrInvalid)
					})

					t.Run("tiers", func(t *testing.T) {
						c := bob
						c.Identifier, c.Cost = "alice", 10
						r := mustCheck(t, e, c)
						require.True(t, r.Allowed, "alice is pro: 50")
						require.EqualValues(t, 40, remaining(t, r, "small"))
						require.Equal(t, "pro", r.Decision.Results[0].Tier)
						c.Identifier = "carol"
						require.False(t, mustCheck(t, e, c).Allowed, "carol has the default 5")
						// A batch resolves tiers too.
						c.Identifier = "alice"
						rs, errs := e.CheckBatch(ctx, []engine.Check{c}, true)
						require.NoError(t, errs[0])
						require.True(t, rs[0].Allowed)
						require.EqualValues(t, 30, remaining(t, rs[0], "small"))
					})

					t.Run("idempotency", func(t *testing.T) {
						c := bob
						c.Identifier, c.IdempotencyKey = "retrier", "req-1"
						for range 3 {
							r := mustCheck(t, e, c)
							require.True(t, r.Allowed)
							require.EqualValues(t, 4, r.Remaining, "a retry was counted")
						}
						c.IdempotencyKey = "req-2"
						require.EqualValues(t, 3, mustCheck(t, e, c).Remaining)
						c.IdempotencyKey = "req-1"
						c.Endpoint = "/api/other" // another check: counted
						require.EqualValues(t, 2, mustCheck(t, e, c).Remaining)
					})

					t.Run("peek", func(t *testing.T) {
						for range 10 {
							r := mustCheck(t, e, peek)
							require.True(t, r.Allowed)
							require.EqualValues(t, 5, r.Remaining)
						}
					})
				})
			}
		})
	}
}

type recorder struct {
	events  []engine.Event
	reloads []error
}

func (r *recorder) Decided(_ context.Context, ev *engine.Event) {
	e := *ev
	if ev.Decision != nil {
		d := *ev.Decision
		e.Decision = &d
	}
	r.events = append(r.events, e)
}

func (r *recorder) Reloaded(_ *rules.Snapshot, err error) { r.reloads = append(r.reloads, err) }

// TestReload checks that a new snapshot applies at once, that counters of
// unchanged rules survive it, and that a refused one leaves the rules in
// force.
func TestReload(t *testing.T) {
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) { testReload(t, newStore(t)) })
	}
}

func testReload(t *testing.T, store core.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := newSource(parse(t, `
rules:
  - name: a
    dimension: user
    rate: 3
    period: 1h
  - name: b
    dimension: user
    algorithm: fixed_window
    rate: 5
    period: 1h
`))
	rec := &recorder{}
	e, err := engine.New(ctx, store, src, engine.WithObserver(rec), engine.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	c := engine.Check{Dimension: "user", Identifier: "u", Cost: 1}
	r := mustCheck(t, e, c)
	require.EqualValues(t, 2, remaining(t, r, "a"))
	require.EqualValues(t, 4, remaining(t, r, "b"))

	next := parse(t, `
rules:
  - name: a
    dimension: user
    rate: 30
    period: 1h
  - name: b
    dimension: user
    algorithm: fixed_window
    rate: 5
    period: 1h
  - name: c
    dimension: user
    rate: 1
    period: 1h
`)
	src.next <- next
	src.bad <- errors.New("rules.yaml:3: rate: broken") // handled after next is applied
	require.Same(t, next, e.Snapshot())
	r = mustCheck(t, e, c)
	require.EqualValues(t, 30, r.Decision.Results[0].Limit.Rate, "the new limit applies at once")
	require.EqualValues(t, 3, remaining(t, r, "b"), "an unchanged rule lost its counter")
	require.EqualValues(t, 0, remaining(t, r, "c"))
	require.False(t, mustCheck(t, e, c).Allowed, "the new rule applies")
	require.Same(t, next, e.Snapshot(), "a bad reload replaced the rules")
	cancel()
	require.NoError(t, <-done)
	require.Len(t, rec.reloads, 2)
	require.NoError(t, rec.reloads[0])
	require.Error(t, rec.reloads[1])
	require.NotEmpty(t, rec.events)
	last := rec.events[len(rec.events)-1]
	require.Equal(t, engine.KindCheck, last.Kind)
	require.False(t, last.Decision.Allowed)
	require.Equal(t, core.OutcomeDenied, last.Decision.Outcome(last.Decision.Binding))
	require.Positive(t, last.Took)
	_, err = e.Check(ctx, engine.Check{})
	require.Error(t, err)
	require.ErrorIs(t, rec.events[len(rec.events)-1].Err, engine.ErrInvalid)
}

// TestBatchParallel decides independent checks of a batch at once: each
// answer is at its check's index, and together they admit exactly the
// limit.
func TestBatchParallel(t *testing.T) {
	ctx := context.Background()
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			e := newEngine(t, newStore(t), fmt.Sprintf(twoRules, core.SlidingWindowLog), engine.WithBatchParallelism(4))
			cs := make([]engine.Check, 20)
			for i := range cs {
				cs[i] = engine.Check{Dimension: "user", Identifier: "par", Endpoint: "/api/x", Cost: 1}
				if i%5 == 4 {
					cs[i].Dimension = "" // invalid: its own error
				}
			}
			rs, errs := e.CheckBatch(ctx, cs, false)
			admitted := 0
			for i := range cs {
				if i%5 == 4 {
					require.ErrorIs(t, errs[i], engine.ErrInvalid)
					continue
				}
				require.NoError(t, errs[i])
				require.Equal(t, "small", rs[i].Rule)
				if rs[i].Allowed {
					admitted++
				}
			}
			require.Equal(t, 5, admitted)
		})
	}
	_, err := engine.New(ctx, memStore(t), rules.NewBytes("r.yaml", []byte("rules: []\n")), engine.WithBatchParallelism(0))
	require.ErrorContains(t, err, "WithBatchParallelism")
}

// TestBatchLarge decides an all-or-nothing batch of many counters: checks
// of one identifier share its counter, past the batch's linear lookup.
func TestBatchLarge(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, memStore(t), fmt.Sprintf(twoRules, core.FixedWindow))
	var cs []engine.Check
	for round := range 2 {
		for i := range 20 {
			cs = append(cs, engine.Check{Dimension: "user", Identifier: fmt.Sprint("u", i), Endpoint: "/api/x", Cost: int64(1 + round)})
		}
	}
	rs, errs := e.CheckBatch(ctx, cs, true)
	for i := range cs {
		require.NoError(t, errs[i])
		require.True(t, rs[i].Allowed)
		require.EqualValues(t, 2, rs[i].Remaining, "check %d: 1 + 2 of 5 from one counter", i)
	}
	cs[39].Cost = 3 // u19 asks 1 + 3 of the 2 left
	rs, _ = e.CheckBatch(ctx, cs, true)
	require.False(t, rs[0].Allowed)
	require.EqualValues(t, 2, mustCheck(t, e, engine.Check{Dimension: "user", Identifier: "u0", Endpoint: "/api/x"}).Remaining, "a denied batch counted")
}

// TestBatchObservedEachItem: the observer sees every check of a batch, as
// its doc says, also when an all-or-nothing batch is not decided because
// one check is invalid (each event carries the error its check got).
func TestBatchObservedEachItem(t *testing.T) {
	ctx := context.Background()
	st, err := memorystore.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	rec := &recorder{}
	e := newEngine(t, st, fmt.Sprintf(twoRules, core.FixedWindow), engine.WithObserver(rec))
	cs := []engine.Check{
		{Dimension: "user", Identifier: "obs", Endpoint: "/api/x", Cost: 1},
		{Identifier: "obs", Endpoint: "/api/x", Cost: 1}, // no dimension
	}
	for _, allOrNothing := range []bool{false, true} {
		rec.events = nil
		_, errs := e.CheckBatch(ctx, cs, allOrNothing)
		require.Len(t, rec.events, len(cs), "all or nothing: %v", allOrNothing)
		for i, ev := range rec.events {
			require.ErrorIs(t, errs[1], engine.ErrInvalid)
			if allOrNothing || i == 1 {
				require.Error(t, ev.Err, "event %d", i)
			}
		}
	}
}
