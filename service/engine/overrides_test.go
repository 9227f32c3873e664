package engine_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rules"
)

// overrideEnv is where the override tests run: stores of one backend
// (each call a new store on the same data: another instance), the clock
// the engines and stores share, and how to let time pass: pass returns
// once the clock the store decides on is past until.
type overrideEnv struct {
	store func(t *testing.T) core.Store
	now   func() time.Time
	pass  func(t *testing.T, until time.Time)
	// lapse is how long a lapsing override lasts in the test.
	lapse time.Duration
}

// overrideEnvs are the memory store on a fake clock and a real Redis on
// the real clock (overrides lapse there in real time).
func overrideEnvs(t *testing.T) map[string]func(t *testing.T) overrideEnv {
	addr := redistest.StartServer(t).Addr
	return map[string]func(t *testing.T) overrideEnv{
		"memory": func(t *testing.T) overrideEnv {
			clock := &fixedClock{now: time.Now()}
			s, err := memorystore.New(memorystore.WithClock(clock.Now))
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			pass := func(_ *testing.T, until time.Time) { clock.Add(max(until.Sub(clock.Now()), 0) + time.Millisecond) }
			return overrideEnv{store: func(*testing.T) core.Store { return s }, now: clock.Now, pass: pass, lapse: 10 * time.Second}
		},
		"redis": func(t *testing.T) overrideEnv {
			c := redis.NewClient(&redis.Options{Addr: addr})
			t.Cleanup(func() { c.Close() })
			require.NoError(t, c.FlushAll(context.Background()).Err())
			return overrideEnv{
				store: func(t *testing.T) core.Store {
					c := redis.NewClient(&redis.Options{Addr: addr}) // one client per instance
					t.Cleanup(func() { c.Close() })
					s, err := redisstore.New(c, redisstore.WithTimeout(5*time.Second))
					require.NoError(t, err)
					return s
				},
				now: time.Now,
				// Redis expires an override's key on its own clock: wait
				// for that clock, not for a guessed time.
				pass: func(t *testing.T, until time.Time) {
					require.Eventually(t, func() bool {
						now, err := c.Time(context.Background()).Result()
						return err == nil && now.After(until.Add(2*time.Millisecond)) // its expiry, rounded up to the ms, passed
					}, 10*time.Second, 5*time.Millisecond, "Redis's clock passes %s", until)
				},
				lapse: 1500 * time.Millisecond,
			}
		},
	}
}

// overrideRules: orders (3 an hour, on /orders) and reads (100 an hour,
// every endpoint) per user, per-ip (2 an hour) per address.
func overrideSnap(t *testing.T, rev string, ovs ...rules.Override) *rules.Snapshot {
	t.Helper()
	s, err := rules.New(rev, []*rules.Rule{
		{ID: "orders", Dimension: "user", Endpoints: []string{"/orders"}, Limit: core.PerHour(3).WithAlgorithm(core.FixedWindow), Tiers: map[string]core.Limit{"pro": core.PerHour(6).WithAlgorithm(core.FixedWindow)}},
		{ID: "reads", Dimension: "user", Limit: core.PerHour(100).WithAlgorithm(core.FixedWindow)},
		{ID: "per-ip", Dimension: "ip", Limit: core.PerHour(2).WithAlgorithm(core.FixedWindow)},
	}, map[string]map[string]string{"user": {"pat": "pro"}}, ovs...)
	require.NoError(t, err)
	return s
}

func order(user string) engine.Check {
	return engine.Check{Dimension: "user", Identifier: user, Endpoint: "/orders", Cost: 1}
}

// applied is an OverridesObserver that hands each application over.
type applied struct {
	ch chan appliedEv
}

type appliedEv struct {
	rev          string
	set, cleared int
	err          error
}

func newApplied() *applied { return &applied{ch: make(chan appliedEv, 16)} }

func (a *applied) Decided(context.Context, *engine.Event) {}
func (a *applied) Reloaded(*rules.Snapshot, error)        {}
func (a *applied) OverridesApplied(s *rules.Snapshot, set, cleared int, err error) {
	a.ch <- appliedEv{s.Revision(), set, cleared, err}
}

// until returns the first application ok accepts, skipping the others.
func (a *applied) until(t *testing.T, ok func(appliedEv) bool) appliedEv {
	t.Helper()
	for {
		if ev := a.next(t); ok(ev) {
			return ev
		}
	}
}

func (a *applied) next(t *testing.T) appliedEv {
	t.Helper()
	select {
	case ev := <-a.ch:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no overrides applied")
		return appliedEv{}
	}
}

// running starts e.Run on src until the test ends.
func running(t *testing.T, e *engine.Engine) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

// spend checks c n times, every one admitted.
func spend(t *testing.T, e *engine.Engine, c engine.Check, n int) {
	t.Helper()
	for i := range n {
		r := mustCheck(t, e, c)
		require.True(t, r.Allowed, "check %d of %d: %+v", i+1, n, r)
	}
}

func TestOverrides(t *testing.T) {
	for name, newEnv := range overrideEnvs(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			env := newEnv(t)
			until := env.now().Add(time.Hour)
			raise := rules.Override{RuleID: "orders", Dimension: "user", Identifier: "ann", Limit: core.PerHour(10).WithAlgorithm(core.FixedWindow), Until: until, Revision: 1}
			lower := rules.Override{RuleID: "orders", Dimension: "user", Identifier: "carl", Limit: core.PerHour(1).WithAlgorithm(core.FixedWindow), Until: until, Revision: 2}
			block := rules.Override{RuleID: "per-ip", Dimension: "ip", Identifier: "10.0.0.9", Until: until, Revision: 3}
			overTier := rules.Override{RuleID: "orders", Dimension: "user", Identifier: "pat", Limit: core.PerHour(8).WithAlgorithm(core.FixedWindow), Until: until, Revision: 4}
			expired := rules.Override{RuleID: "orders", Dimension: "user", Identifier: "old", Until: env.now().Add(-time.Second)}
			snap := overrideSnap(t, "1", raise, lower, block, overTier, expired)
			obs := newApplied()
			src := newSource(snap)
			e, err := engine.New(ctx, env.store(t), src, engine.WithClock(env.now), engine.WithObserver(obs))
			require.NoError(t, err)
			require.Equal(t, appliedEv{"1", 4, 0, nil}, obs.next(t), "every override in force set at start, the expired one not")

			// A raise: 10 for ann on orders, under native checks and
			// checks naming the rule alike (one counter).
			spend(t, e, order("ann"), 9)
			named := order("ann")
			named.Rule = "orders"
			r := mustCheck(t, e, named)
			require.True(t, r.Allowed)
			require.EqualValues(t, 10, r.Limit)
			require.EqualValues(t, 0, r.Remaining)
			r = mustCheck(t, e, order("ann"))
			require.False(t, r.Allowed)
			require.Equal(t, "orders", r.Rule)
			require.EqualValues(t, 10, r.Limit)
			// Other rules of ann unchanged: reads counted the 9 native
			// checks (not the one naming orders, not the denial), at 100.
			r = mustCheck(t, e, engine.Check{Dimension: "user", Identifier: "ann", Endpoint: "/other"})
			require.Equal(t, "reads", r.Rule)
			require.EqualValues(t, 100, r.Limit)
			require.EqualValues(t, 9, r.Used)
			// Other callers unchanged: bob has 3.
			spend(t, e, order("bob"), 3)
			r = mustCheck(t, e, order("bob"))
			require.False(t, r.Allowed)
			require.EqualValues(t, 3, r.Limit)
			// A lower limit: 1 for carl.
			spend(t, e, order("carl"), 1)
			require.False(t, mustCheck(t, e, order("carl")).Allowed)
			// An override wins over the caller's tier: 8 for pat (pro: 6).
			spend(t, e, order("pat"), 8)
			r = mustCheck(t, e, order("pat"))
			require.False(t, r.Allowed)
			require.EqualValues(t, 8, r.Limit)
			// A block denies, peeks included; another address is not.
			ip := func(addr string, cost int64) engine.Result {
				return mustCheck(t, e, engine.Check{Dimension: "ip", Identifier: addr, Cost: cost})
			}
			r = ip("10.0.0.9", 1)
			require.False(t, r.Allowed)
			require.Equal(t, core.Throttled, r.State)
			require.Greater(t, r.RetryAfter, 50*time.Minute)
			require.False(t, ip("10.0.0.9", 0).Allowed)
			require.True(t, ip("10.0.0.8", 1).Allowed)
			// The expired override applies nothing: old has the rule's 3.
			spend(t, e, order("old"), 3)
			require.False(t, mustCheck(t, e, order("old")).Allowed)

			// A second instance on the same store, and a restart: the
			// same snapshot applied again keeps ann's count.
			e2, err := engine.New(ctx, env.store(t), newSource(snap), engine.WithClock(env.now))
			require.NoError(t, err)
			r = mustCheck(t, e2, named)
			require.False(t, r.Allowed, "a second instance reset the override: %+v", r)
			require.EqualValues(t, 10, r.Used)
			require.False(t, mustCheck(t, e2, order("carl")).Allowed)
			require.False(t, mustCheck(t, e2, engine.Check{Dimension: "ip", Identifier: "10.0.0.9", Cost: 1}).Allowed)

			// Reloads: the same overrides, nothing set again.
			running(t, e)
			src.next <- overrideSnap(t, "2", raise, lower, block, overTier, expired)
			require.Equal(t, appliedEv{"2", 0, 0, nil}, obs.next(t))
			require.False(t, mustCheck(t, e, named).Allowed)
			// Changed (the raise goes to 12 with a new revision), cleared
			// (carl's, the block) and kept (pat's).
			raise12 := raise
			raise12.Limit, raise12.Revision = core.PerHour(12).WithAlgorithm(core.FixedWindow), 5
			src.next <- overrideSnap(t, "3", raise12, overTier)
			require.Equal(t, appliedEv{"3", 1, 2, nil}, obs.next(t))
			r = mustCheck(t, e, named)
			require.True(t, r.Allowed, "a changed override counts afresh")
			require.EqualValues(t, 12, r.Limit)
			require.EqualValues(t, 11, r.Remaining)
			// carl is back on the rule's 3 (the override counted apart).
			spend(t, e, order("carl"), 3)
			require.False(t, mustCheck(t, e, order("carl")).Allowed)
			require.True(t, ip("10.0.0.9", 1).Allowed, "the block was cleared")
			r = mustCheck(t, e, order("pat"))
			require.False(t, r.Allowed, "pat's override kept its count")
			require.EqualValues(t, 8, r.Limit)
			// The restarted second instance applies snapshot 3 as well:
			// nothing reset.
			e3, err := engine.New(ctx, env.store(t), newSource(overrideSnap(t, "3", raise12, overTier)), engine.WithClock(env.now))
			require.NoError(t, err)
			r = mustCheck(t, e3, named)
			require.EqualValues(t, 12, r.Limit)
			require.EqualValues(t, 10, r.Remaining)
		})
	}
}

// An override lapses at its Until in the store, with no reload; a rule
// that goes with its override, then comes back, has no override left.
func TestOverrideLapsesAndRuleVanishes(t *testing.T) {
	for name, newEnv := range overrideEnvs(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			env := newEnv(t)
			o := rules.Override{RuleID: "orders", Dimension: "user", Identifier: "ann", Limit: core.PerHour(5).WithAlgorithm(core.FixedWindow), Until: env.now().Add(env.lapse)}
			b := rules.Override{RuleID: "per-ip", Dimension: "ip", Identifier: "10.0.0.9", Until: env.now().Add(env.lapse)}
			bob := rules.Override{RuleID: "orders", Dimension: "user", Identifier: "bob", Limit: core.PerHour(20).WithAlgorithm(core.FixedWindow), Until: env.now().Add(time.Hour)}
			e, err := engine.New(ctx, env.store(t), newSource(overrideSnap(t, "1", o, b, bob)), engine.WithClock(env.now))
			require.NoError(t, err)
			spend(t, e, order("ann"), 5)
			require.False(t, mustCheck(t, e, order("ann")).Allowed)
			require.False(t, mustCheck(t, e, engine.Check{Dimension: "ip", Identifier: "10.0.0.9", Cost: 1}).Allowed)
			env.pass(t, o.Until) // b's too
			r := mustCheck(t, e, order("ann"))
			require.True(t, r.Allowed, "the override lapsed: the rule's own 3 again")
			require.EqualValues(t, 3, r.Limit)
			require.True(t, mustCheck(t, e, engine.Check{Dimension: "ip", Identifier: "10.0.0.9", Cost: 1}).Allowed, "the block lapsed")

			// Rule orders goes (with bob's override), then comes back
			// without it: bob has the rule's 3, not 20.
			obs := newApplied()
			src := newSource(overrideSnap(t, "1", bob))
			e, err = engine.New(ctx, env.store(t), src, engine.WithClock(env.now), engine.WithObserver(obs))
			require.NoError(t, err)
			obs.next(t)
			running(t, e)
			spend(t, e, order("bob"), 4)
			gone, err := rules.New("2", []*rules.Rule{{ID: "reads", Dimension: "user", Limit: core.PerHour(100)}}, nil)
			require.NoError(t, err)
			src.next <- gone
			require.Equal(t, appliedEv{"2", 0, 1, nil}, obs.next(t))
			src.next <- overrideSnap(t, "3")
			require.Equal(t, appliedEv{"3", 0, 0, nil}, obs.next(t))
			r = mustCheck(t, e, order("bob"))
			require.EqualValues(t, 3, r.Limit, "the override went with its rule")
		})
	}
}

// failingOverrides is a real store whose override calls fail while fail is
// set.
type failingOverrides struct {
	core.Store
	mu   sync.Mutex
	fail bool
}

var errOverrideDown = errors.New("store down")

func (f *failingOverrides) failing() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fail
}

func (f *failingOverrides) SetOverride(ctx context.Context, k core.Key, o core.Override) error {
	if f.failing() {
		return errOverrideDown
	}
	return f.Store.SetOverride(ctx, k, o)
}

func (f *failingOverrides) ClearOverride(ctx context.Context, k core.Key) error {
	if f.failing() {
		return errOverrideDown
	}
	return f.Store.ClearOverride(ctx, k)
}

// An override the store refuses is logged and reported, never fatal, and
// applied again every second (with no new snapshot) or with the next
// snapshot.
func TestOverrideErrorsRetried(t *testing.T) {
	ctx := context.Background()
	st := &failingOverrides{Store: memStore(t), fail: true}
	failing := func(f bool) {
		st.mu.Lock()
		st.fail = f
		st.mu.Unlock()
	}
	until := time.Now().Add(time.Hour)
	o := rules.Override{RuleID: "orders", Dimension: "user", Identifier: "ann", Limit: core.PerHour(10).WithAlgorithm(core.FixedWindow), Until: until}
	obs := newApplied()
	src := newSource(overrideSnap(t, "1", o))
	e, err := engine.New(ctx, st, src, engine.WithObserver(obs))
	require.NoError(t, err, "an override that fails is not fatal")
	ev := obs.next(t)
	require.Equal(t, 0, ev.set)
	require.ErrorIs(t, ev.err, errOverrideDown)
	require.ErrorContains(t, ev.err, `rule "orders" for a user`)
	require.NotContains(t, ev.err.Error(), "ann", "no identifier in errors")
	require.EqualValues(t, 3, mustCheck(t, e, order("ann")).Limit, "not applied")

	// Retried with no new snapshot once the store is back.
	running(t, e)
	require.ErrorIs(t, obs.next(t).err, errOverrideDown, "retried while failing")
	failing(false)
	require.Equal(t, appliedEv{"1", 1, 0, nil}, obs.until(t, func(ev appliedEv) bool { return ev.err == nil }))
	require.EqualValues(t, 10, mustCheck(t, e, order("ann")).Limit, "applied by the retry")

	// A clear that fails is retried too, with the next snapshot.
	failing(true)
	src.next <- overrideSnap(t, "3")
	ev = obs.next(t)
	require.Equal(t, 0, ev.cleared)
	require.ErrorIs(t, ev.err, errOverrideDown)
	require.EqualValues(t, 10, mustCheck(t, e, order("ann")).Limit)
	failing(false)
	src.next <- overrideSnap(t, "4")
	require.Equal(t, appliedEv{"4", 0, 1, nil}, obs.until(t, func(ev appliedEv) bool { return ev.err == nil }))
	require.EqualValues(t, 3, mustCheck(t, e, order("ann")).Limit)
	require.Never(t, func() bool { return len(obs.ch) > 0 }, 1500*time.Millisecond, 100*time.Millisecond, "nothing left: no retries")

	// Set, then a change that fails (the store keeps the first), then
	// gone: the first is cleared.
	src.next <- overrideSnap(t, "5", o)
	require.Equal(t, appliedEv{"5", 1, 0, nil}, obs.next(t))
	failing(true)
	o12 := o
	o12.Limit = core.PerHour(12).WithAlgorithm(core.FixedWindow)
	src.next <- overrideSnap(t, "6", o12)
	require.ErrorIs(t, obs.next(t).err, errOverrideDown)
	require.EqualValues(t, 10, mustCheck(t, e, order("ann")).Limit)
	failing(false)
	src.next <- overrideSnap(t, "7")
	require.Equal(t, appliedEv{"7", 0, 1, nil}, obs.until(t, func(ev appliedEv) bool { return ev.err == nil }))
	require.EqualValues(t, 3, mustCheck(t, e, order("ann")).Limit)
}

// A store that is down holds nothing up: after a few failures an
// application leaves the rest for the retry.
func TestOverrideFailuresBounded(t *testing.T) {
	st := &failingOverrides{Store: memStore(t), fail: true}
	var ovs []rules.Override
	for i := range 50 {
		ovs = append(ovs, rules.Override{RuleID: "orders", Dimension: "user", Identifier: fmt.Sprintf("u%d", i), Until: time.Now().Add(time.Hour)})
	}
	calls := &countingOverrides{failingOverrides: st}
	obs := newApplied()
	_, err := engine.New(context.Background(), calls, newSource(overrideSnap(t, "1", ovs...)), engine.WithObserver(obs))
	require.NoError(t, err)
	ev := obs.next(t)
	require.ErrorContains(t, ev.err, "overrides left to retry: the store is failing (47)")
	require.EqualValues(t, 3, calls.n.Load(), "three tries, then the rest left")
}

// countingOverrides counts SetOverride calls.
type countingOverrides struct {
	*failingOverrides
	n atomic.Int64
}

func (c *countingOverrides) SetOverride(ctx context.Context, k core.Key, o core.Override) error {
	c.n.Add(1)
	return c.failingOverrides.SetOverride(ctx, k, o)
}

// An override of a rule that counts nothing (unlimited) is reported once,
// not retried.
func TestOverrideOfUncountedRule(t *testing.T) {
	s, err := rules.New("1", []*rules.Rule{{ID: "free", Dimension: "user", Unlimited: true}}, nil,
		rules.Override{RuleID: "free", Dimension: "user", Identifier: "ann", Until: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	obs := newApplied()
	src := newSource(s)
	e, err := engine.New(context.Background(), memStore(t), src, engine.WithObserver(obs))
	require.NoError(t, err)
	require.ErrorContains(t, obs.next(t).err, `override of rule "free" for a user: the rule counts nothing`)
	running(t, e)
	require.Never(t, func() bool { return len(obs.ch) > 0 }, 1500*time.Millisecond, 100*time.Millisecond, "not retried")
	require.True(t, mustCheck(t, e, engine.Check{Dimension: "user", Identifier: "ann", Cost: 1}).Allowed)
}

// BenchmarkOverridesReload is the cost of putting in force a snapshot with
// n overrides, none changed (the diff alone), and the first application
// of all of them (engine.New) on the memory store.
func BenchmarkOverridesReload(b *testing.B) {
	for _, n := range []int{100, 10_000} {
		ovs := make([]rules.Override, n)
		until := time.Now().Add(time.Hour)
		for i := range ovs {
			ovs[i] = rules.Override{RuleID: "orders", Dimension: "user", Identifier: fmt.Sprintf("user-%d", i), Limit: core.PerHour(int64(10 + i%5)).WithAlgorithm(core.FixedWindow), Until: until, Revision: int64(i)}
		}
		snap, err := rules.New("1", []*rules.Rule{{ID: "orders", Dimension: "user", Limit: core.PerHour(3).WithAlgorithm(core.FixedWindow)}}, nil, ovs...)
		require.NoError(b, err)
		quiet := engine.WithLogger(slog.New(slog.DiscardHandler))
		b.Run(fmt.Sprintf("new/%d", n), func(b *testing.B) {
			store := memStore(b)
			for b.Loop() {
				_, err := engine.New(context.Background(), store, newSource(snap), quiet)
				require.NoError(b, err)
			}
		})
		b.Run(fmt.Sprintf("unchanged/%d", n), func(b *testing.B) {
			obs := newApplied()
			src := newSource(snap)
			e, err := engine.New(context.Background(), memStore(b), src, quiet, engine.WithObserver(obs))
			require.NoError(b, err)
			<-obs.ch
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { _ = e.Run(ctx) }()
			for b.Loop() {
				src.next <- snap
				<-obs.ch
			}
		})
	}
}
