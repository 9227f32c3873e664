package limitertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/algo"
)

// Clock is a manual clock shared by the suite and the store under test. It
// starts at least one hour after the real time, aligned to the hour (stores
// with absolute expiries, such as Redis, keep keys alive in real time, so a
// test may step it back by up to half an hour), and moves only when the
// suite advances it.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock set one to two hours ahead of the real time, on
// the hour.
func NewClock() *Clock {
	return &Clock{now: time.Now().Add(2 * time.Hour).Truncate(time.Hour)}
}

// Now returns the clock's instant; pass it to the store as its time source.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward (or back, for negative d).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Factory returns a fresh store whose time source is clock. Stores made by one
// Factory may share a backend: the suite uses distinct keys in every subtest.
// The long random traces (Reference, ClockSteps, Waits, WaitsOverrides) run
// one subtest per algorithm in parallel, each on a store and clock of its
// own: a Factory is called from several goroutines at once.
type Factory func(t *testing.T, clock func() time.Time) core.Store

// Algorithms lists the six algorithms in a fixed order.
var Algorithms = []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.FixedWindow, core.SlidingWindowLog, core.SlidingWindowCounter, core.GCRA}

// Run runs the whole suite against stores made by newStore.
func Run(t *testing.T, newStore Factory) {
	t.Run("Reference", func(t *testing.T) { testReference(t, newStore) })
	t.Run("Concurrency", func(t *testing.T) { testConcurrency(t, newStore) })
	t.Run("BadInput", func(t *testing.T) { testBadInput(t, newStore) })
	t.Run("Reset", func(t *testing.T) { testReset(t, newStore) })
	t.Run("Isolation", func(t *testing.T) { testIsolation(t, newStore) })
	t.Run("ClockSteps", func(t *testing.T) { testClockSteps(t, newStore) })
	t.Run("ClockStepCases", func(t *testing.T) { testClockStepCases(t, newStore) })
	t.Run("Waits", func(t *testing.T) { testWaits(t, newStore) })
	t.Run("WaitsOverrides", func(t *testing.T) { testWaitsOverrides(t, newStore) })
	t.Run("Batch", func(t *testing.T) { testBatch(t, newStore) })
	t.Run("Refunds", func(t *testing.T) { testRefundsExact(t, newStore) })
	t.Run("Overrides", func(t *testing.T) { testOverrides(t, newStore) })
	t.Run("OverridesIdempotent", func(t *testing.T) { testOverridesIdempotent(t, newStore) })
	t.Run("Keys", func(t *testing.T) { testKeys(t, newStore) })
	t.Run("Booking", func(t *testing.T) { testBooking(t, newStore) })
	if probe, ok := newStore(t, NewClock().Now).(core.EachTaker); ok && probe != nil {
		t.Run("Each", func(t *testing.T) { testEach(t, newStore) })
	}
}

var keySeq atomic.Int64

// Key returns a key no other subtest uses: a fresh identity under the
// policy "p".
func Key(t testing.TB) core.Key {
	return core.Key{Identity: fmt.Sprintf("lt-%d-%d-%s", time.Now().UnixNano()%1e9, keySeq.Add(1), t.Name()), Policy: "p"}
}

// TakeOne is a Take of one op: cost units of k under l.
func TakeOne(ctx context.Context, s core.Store, k core.Key, l core.Limit, cost int64) (core.Result, error) {
	var out [1]core.Result
	err := s.Take(ctx, []core.Op{{Key: k, Limit: l, Cost: cost}}, out[:])
	return out[0], err
}

// reference replays one key through the step functions.
type reference struct {
	sp algo.Spec
	st algo.State
	lg algo.Log
}

func (r *reference) take(now, cost int64) core.Result {
	var o algo.Outcome
	if r.sp.Algorithm == core.SlidingWindowLog {
		r.sp.StepLog(&r.lg, &o, now, cost)
	} else {
		r.sp.Step(&r.st, &o, now, cost)
	}
	return r.sp.Result(&o)
}

// Limits returns, for each algorithm, a few limits that exercise exact
// fractional intervals, bursts and short periods.
func Limits(a core.Algorithm) []core.Limit {
	ls := []core.Limit{core.Per(5, time.Second), core.Per(7, 3*time.Second), core.Per(20, 100*time.Millisecond)}
	if a.Bucket() {
		ls = append(ls, core.Per(3, time.Second).WithBurst(8), core.Per(1000, time.Hour).WithBurst(2))
	}
	for i := range ls {
		ls[i].Algorithm = a
	}
	return ls
}

// testReference drives random traces through the store and the step
// functions and requires identical Results at every step.
func testReference(t *testing.T, newStore Factory) {
	for _, a := range Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			t.Parallel()
			clock := NewClock()
			s := newStore(t, clock.Now)
			rng := rand.New(rand.NewPCG(uint64(a), 42))
			for _, l := range Limits(a) {
				key := Key(t)
				ref := &reference{sp: algo.MustCompile(l)}
				step := l.Period / time.Duration(l.Rate) * 2
				for i := range 120 {
					switch rng.IntN(10) {
					case 0:
						clock.Advance(time.Duration(rng.Int64N(int64(l.Period))))
					case 1, 2:
					default:
						clock.Advance(time.Duration(rng.Int64N(int64(step))).Truncate(time.Microsecond))
					}
					cost := int64(1)
					switch rng.IntN(8) {
					case 0:
						cost = 0
					case 1:
						cost = rng.Int64N(l.Capacity() + 2)
					}
					got, err := TakeOne(context.Background(), s, key, l, cost)
					if err != nil {
						t.Fatalf("%s step %d: Take: %v", l, i, err)
					}
					want := ref.take(clock.Now().UnixMicro(), cost)
					if got != want {
						t.Fatalf("%s step %d cost %d:\n got %+v\nwant %+v", l, i, cost, got, want)
					}
				}
			}
		})
	}
}

// testConcurrency: 64 goroutines hammer one key with a frozen clock; exactly
// the capacity is admitted.
func testConcurrency(t *testing.T, newStore Factory) {
	for _, a := range Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			clock := NewClock()
			s := newStore(t, clock.Now)
			l := core.Per(100, time.Minute).WithAlgorithm(a)
			key := Key(t)
			var admitted, denied atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, 64)
			for range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 5 {
						r, err := TakeOne(context.Background(), s, key, l, 1)
						if err != nil {
							errs <- err
							return
						}
						if r.Allowed {
							admitted.Add(1)
						} else {
							denied.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("Take: %v", err)
			}
			if admitted.Load() != 100 || denied.Load() != 220 {
				t.Fatalf("admitted %d denied %d, want exactly 100 and 220", admitted.Load(), denied.Load())
			}
		})
	}
}

func testBadInput(t *testing.T, newStore Factory) {
	clock := NewClock()
	s := newStore(t, clock.Now)
	ctx := context.Background()
	type badCase struct {
		name  string
		key   core.Key
		l     core.Limit
		cost  int64
		want  error
		field string
	}
	cases := []badCase{
		{"empty identity", core.Key{Policy: "p"}, core.PerSecond(1), 1, core.ErrNoKey, "ops[0].Key.Identity"},
		{"negative cost", Key(t), core.PerSecond(1), -1, core.ErrInvalidCost, "ops[0].Cost"},
		{"zero limit", Key(t), core.Limit{}, 1, core.ErrInvalidLimit, "ops[0].Limit.Algorithm"},
	}
	for _, c := range InvalidLimits() {
		cases = append(cases, badCase{fmt.Sprintf("invalid limit %d (%s)", c.Check, c.Limit), Key(t), c.Limit, 1, core.ErrInvalidLimit, "ops[0].Limit." + c.Field})
	}
	for _, c := range cases {
		_, err := TakeOne(ctx, s, c.key, c.l, c.cost)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: Take error %v, want %v", c.name, err, c.want)
		}
		checkField(t, c.name, err, c.field)
	}
	badCalls(ctx, t, s, clock)
	badGroups(ctx, t, s)
	oddKeys(ctx, t, s)
}

// badCalls: a Reset, Refund or SetOverride of bad input is an error
// wrapping the sentinel of what is wrong and a *core.FieldError naming the
// field of its arguments.
func badCalls(ctx context.Context, t *testing.T, s core.Store, clock *Clock) {
	for _, c := range []struct {
		what  string
		err   error
		want  error
		field string
	}{
		{"Reset with an empty identity", s.Reset(ctx, core.Key{Policy: "p"}, core.PerSecond(1)), core.ErrNoKey, "Key.Identity"},
		{"Refund of a negative cost", s.Refund(ctx, core.Admission{Key: Key(t), Limit: core.PerSecond(1), Cost: -1, At: 1}), core.ErrInvalidCost, "Cost"},
		{"Refund under an invalid limit", s.Refund(ctx, core.Admission{Key: Key(t), Limit: core.PerSecond(0), Cost: 1, At: 1}), core.ErrInvalidLimit, "Limit.Rate"},
		{"SetOverride with an empty identity", s.SetOverride(ctx, core.Key{Policy: "p"}, core.Override{Until: time.Now().Add(time.Hour)}), core.ErrNoKey, "Key.Identity"},
		{"SetOverride of an invalid limit", s.SetOverride(ctx, Key(t), core.Override{Limit: core.PerSecond(0), Until: clock.Now().Add(time.Hour)}), core.ErrInvalidLimit, "Limit.Rate"},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.what, c.err, c.want)
		}
		checkField(t, c.what, c.err, c.field)
	}
}

// checkField reports an error unless err holds a *core.FieldError (see
// errors.As) of field.
func checkField(t *testing.T, what string, err error, field string) {
	t.Helper()
	var fe *core.FieldError
	switch {
	case !errors.As(err, &fe):
		t.Errorf("%s: %v holds no *core.FieldError (want field %s)", what, err, field)
	case fe.Field != field:
		t.Errorf("%s: %v names field %q, want %q", what, err, fe.Field, field)
	}
}

// badGroups: a group with one bad op is an error naming the op, and takes
// nothing; out must be as long as ops; a Take of no op does nothing.
func badGroups(ctx context.Context, t *testing.T, s core.Store) {
	good := Key(t)
	err := s.Take(ctx, []core.Op{{Key: good, Limit: core.PerSecond(1), Cost: 1}, {Key: Key(t), Limit: core.PerSecond(1), Cost: -1}}, make([]core.Result, 2))
	if !errors.Is(err, core.ErrInvalidCost) {
		t.Errorf("a group with a negative cost in op 1: %v, want ErrInvalidCost", err)
	}
	checkField(t, "a group with a negative cost in op 1", err, "ops[1].Cost")
	if r, err := TakeOne(ctx, s, good, core.PerSecond(1), 0); err != nil || r.Remaining != 1 {
		t.Errorf("the invalid group consumed: %+v %v", r, err)
	}
	if err := s.Take(ctx, []core.Op{{Key: good, Limit: core.PerSecond(1), Cost: 1}}, make([]core.Result, 2)); err == nil {
		t.Error("Take with len(out) != len(ops): no error")
	}
	if err := s.Take(ctx, nil, nil); err != nil {
		t.Errorf("Take of no op: %v", err)
	}
}

// oddKeys: identities and policies with every kind of byte are keys like
// any other.
func oddKeys(ctx context.Context, t *testing.T, s core.Store) {
	for _, part := range []string{"{", "}", "{a}", "a:{b}:c", "\x00\xff", string(make([]byte, 4096))} {
		k := Key(t)
		for _, key := range []core.Key{{Identity: part + k.Identity, Policy: "p"}, {Identity: k.Identity, Policy: part}, {Identity: part + k.Identity}} {
			r, err := TakeOne(ctx, s, key, core.PerSecond(2), 2)
			if err != nil || !r.Allowed {
				t.Errorf("key %q: %+v %v", key, r, err)
			}
		}
	}
}

func testReset(t *testing.T, newStore Factory) {
	for _, a := range Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			clock := NewClock()
			s := newStore(t, clock.Now)
			ctx := context.Background()
			l := core.PerMinute(3).WithAlgorithm(a)
			key := Key(t)
			if r, err := TakeOne(ctx, s, key, l, 3); err != nil || !r.Allowed {
				t.Fatalf("first take: %+v %v", r, err)
			}
			if r, _ := TakeOne(ctx, s, key, l, 1); r.Allowed || r.State != core.Throttled {
				t.Fatalf("over the limit: %+v", r)
			}
			if err := s.Reset(ctx, key, l); err != nil {
				t.Fatal(err)
			}
			r, err := TakeOne(ctx, s, key, l, 0)
			if err != nil || !r.Allowed || r.Remaining != 3 || r.State != core.Normal || r.ResetAfter != 0 {
				t.Fatalf("after Reset, peek: %+v %v", r, err)
			}
		})
	}
}

// testIsolation: different keys, and the same key under different
// algorithms, never share state.
func testIsolation(t *testing.T, newStore Factory) {
	clock := NewClock()
	s := newStore(t, clock.Now)
	ctx := context.Background()
	key := Key(t)
	for _, a := range Algorithms {
		l := core.PerMinute(1).WithAlgorithm(a)
		if r, err := TakeOne(ctx, s, key, l, 1); err != nil || !r.Allowed {
			t.Fatalf("%s on a shared key name: %+v %v", a, r, err)
		}
	}
	for i := range 50 {
		if r, err := TakeOne(ctx, s, core.Key{Identity: fmt.Sprintf("%s-%d", key.Identity, i), Policy: key.Policy}, core.PerMinute(1), 1); err != nil || !r.Allowed {
			t.Fatalf("key %d: %+v %v", i, r, err)
		}
	}
}

// testKeys: a key is its identity and its policy, both: another policy of
// the same identity, or another identity under the same policy, is another
// state; Reset, overrides and refunds apply to their key alone.
func testKeys(t *testing.T, newStore Factory) {
	clock := NewClock()
	s := newStore(t, clock.Now)
	ctx := context.Background()
	l := core.PerMinute(2)
	k := Key(t)
	samePolicy := core.Key{Identity: k.Identity + "-2", Policy: k.Policy}
	sameIdentity := core.Key{Identity: k.Identity, Policy: k.Policy + "2"}
	noPolicy := core.Key{Identity: k.Identity}
	mustTake := func(key core.Key, cost int64) core.Result {
		t.Helper()
		r, err := TakeOne(ctx, s, key, l, cost)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := mustTake(k, 2); !r.Allowed {
		t.Fatalf("first take: %+v", r)
	}
	for _, other := range []core.Key{samePolicy, sameIdentity, noPolicy} {
		if r := mustTake(other, 0); r.Remaining != 2 {
			t.Fatalf("%q shares %q's state: %+v", other, k, r)
		}
	}
	if err := s.SetOverride(ctx, sameIdentity, core.Override{Until: clock.Now().Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if r := mustTake(sameIdentity, 1); r.Allowed {
		t.Fatalf("blocked key admitted: %+v", r)
	}
	if r := mustTake(samePolicy, 1); !r.Allowed {
		t.Fatalf("another identity's block applied: %+v", r)
	}
	if err := s.ClearOverride(ctx, sameIdentity); err != nil {
		t.Fatal(err)
	}
	if err := s.Reset(ctx, samePolicy, l); err != nil {
		t.Fatal(err)
	}
	if r := mustTake(k, 0); r.Remaining != 0 {
		t.Fatalf("another key's Reset reset %q: %+v", k, r)
	}
	if err := s.Reset(ctx, k, l); err != nil {
		t.Fatal(err)
	}
	if r := mustTake(k, 0); r.Remaining != 2 {
		t.Fatalf("Reset did not reset %q: %+v", k, r)
	}
}
