package lease_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/algo"
	"github.com/sluicehq/sluice/core/lease"
	"github.com/sluicehq/sluice/core/limitertest"
)

// reference replays, in the order they happened, every admission and
// every refund that gave units back, at the instants the store's clock
// showed, through the algorithm itself: every admission must be one the
// algorithm admits.
type reference struct {
	t    testing.TB
	sp   algo.Spec
	st   algo.State
	n    int     // admissions replayed
	ats  []int64 // the instant the reference recorded each admission at
	cost []int64
}

func newReference(t testing.TB, l core.Limit) *reference {
	return &reference{t: t, sp: algo.MustCompile(l)}
}

// admit replays an admission of cost at now, and returns its id.
func (r *reference) admit(now, cost int64, what string) int {
	r.t.Helper()
	var o algo.Outcome
	r.sp.Step(&r.st, &o, now, cost)
	if !o.Allowed {
		r.t.Errorf("over the limit: %s: the algorithm denies an admission of %d at %d (admission %d): %+v", what, cost, now, r.n, r.sp.Result(&o))
	}
	r.n++
	r.ats, r.cost = append(r.ats, o.At), append(r.cost, cost)
	return len(r.ats) - 1
}

// refund replays the refund of admission id at now.
func (r *reference) refund(now int64, id int) { r.sp.Refund(&r.st, now, r.cost[id], r.ats[id]) }

// traceLimit returns the limit of a for the random traces: small, so that
// the traces live at and over it.
func traceLimit(a core.Algorithm, rng *rand.Rand) core.Limit {
	l := core.Per(10+rng.Int64N(40), time.Duration(50+rng.IntN(400))*time.Millisecond).WithAlgorithm(a)
	if a.Bucket() {
		l = l.WithBurst(l.Rate/2 + rng.Int64N(2*l.Rate))
	}
	return l
}

// clocks are the clocks of a trace: the store's, which moves forward
// only (the timeline the reference replays on), and each instance's,
// which is the store's plus an offset that steps back and forth.
type clocks struct {
	store *limitertest.Clock
	mu    sync.Mutex
	off   []time.Duration
}

func (c *clocks) instance(i int) func() time.Time {
	return func() time.Time {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.store.Now().Add(c.off[i])
	}
}

// step steps instance i's clock by d, either way.
func (c *clocks) step(i int, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off[i] += d
}

// now is the instant the reference replays an event at: the store's
// clock's.
func (c *clocks) now() int64 { return c.store.Now().UnixMicro() }

type made struct {
	inst int
	a    core.Admission
	ref  int
}

// One random trace: m instances (lease layers over one memory store, on
// one manual clock) deciding one key at, under and over its limit, with
// costs of 1 to 3 and peeks, the clock moving on, stepping back and
// jumping, refunds of earlier admissions, sweeps that end blocks, and
// instances closed and rebuilt mid-block. It returns what the instances
// decided locally.
func runTrace(t *testing.T, a core.Algorithm, seed uint64) (local, total int) {
	rng := rand.New(rand.NewPCG(seed, uint64(a)))
	l := traceLimit(a, rng)
	hold := time.Duration(5+rng.IntN(300)) * time.Millisecond
	m := 2 + rng.IntN(4)
	clock := &clocks{store: limitertest.NewClock(), off: make([]time.Duration, m)}
	mem := newMemory(t, clock.store.Now)
	build := func(i int) *lease.Store {
		s, err := lease.New(mem, lease.WithClock(clock.instance(i)), lease.WithSweepInterval(time.Hour), lease.WithShare(0.1+0.9*rng.Float64()))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	insts := make([]*lease.Store, m)
	for i := range insts {
		insts[i] = build(i)
	}
	defer func() {
		for _, s := range insts {
			local += int(s.Stats().Local)
			_ = s.Close()
		}
	}()
	weights := make([]int, m)
	for i := range weights {
		weights[i] = 1 + rng.IntN(8)
	}
	pick := func() int {
		sum := 0
		for _, w := range weights {
			sum += w
		}
		x := rng.IntN(sum)
		for i, w := range weights {
			if x < w {
				return i
			}
			x -= w
		}
		return 0
	}
	ctx := context.Background()
	key := limitertest.Key(t)
	ref := newReference(t, l)
	interval := l.Period / time.Duration(l.Rate)
	var adm []made
	debug := os.Getenv("LEASE_DEBUG") != ""
	var hist []string
	logf := func(format string, args ...any) {
		if debug {
			hist = append(hist, fmt.Sprintf(format, args...))
		}
	}
	defer func() {
		if t.Failed() {
			for _, h := range hist[max(0, len(hist)-80):] {
				t.Log(h)
			}
		}
	}()
	for step := range 2000 {
		for _, s := range insts {
			s.Tick() // the clocks are read all the time, as traffic reads them
		}
		now := clock.now()
		logf("step %d raw %d now %d", step, clock.store.Now().UnixMicro(), now)
		switch x := rng.IntN(100); {
		case x < 30:
			clock.store.Advance(time.Duration(rng.Int64N(int64(2 * interval))).Truncate(time.Microsecond))
		case x < 32:
			clock.step(rng.IntN(m), -time.Duration(rng.Int64N(int64(l.Period))).Truncate(time.Microsecond))
		case x < 33:
			clock.step(rng.IntN(m), time.Duration(rng.Int64N(int64(3*l.Period))).Truncate(time.Microsecond))
		case x < 34:
			clock.store.Advance(time.Duration(rng.Int64N(int64(3 * l.Period))).Truncate(time.Microsecond))
		case x < 38 && len(adm) > 0:
			j := rng.IntN(len(adm))
			d := adm[j]
			adm = append(adm[:j], adm[j+1:]...)
			if err := insts[d.inst].Refund(ctx, d.a); err != nil {
				t.Fatal(err)
			}
			if !a.Bucket() { // a leased bucket's refund gives nothing back
				ref.refund(now, d.ref)
			}
		case x < 39:
			i := rng.IntN(m)
			local += int(insts[i].Stats().Local)
			_ = insts[i].Close()
			insts[i] = build(i) // its admissions are refunded through the new one

		case x < 41:
			insts[rng.IntN(m)].Sweep()
		default:
			i := pick()
			cost := int64(1)
			switch y := rng.IntN(20); {
			case y == 0:
				cost = 0
			case y < 3:
				cost = 2 + rng.Int64N(2)
			}
			var out [1]core.Result
			op := core.Op{Key: key, Limit: l, Cost: cost, Lease: hold}
			if err := insts[i].Take(ctx, []core.Op{op}, out[:]); err != nil {
				t.Fatal(err)
			}
			r := out[0]
			logf("  inst %d cost %d: %+v stats %+v", i, cost, r, insts[i].Stats())
			honest(t, mem, key, l, r)
			if r.Allowed && cost > 0 {
				id := ref.admit(now, cost, fmt.Sprintf("%s %s hold %s, step %d, instance %d", a, l, hold, step, i))
				if t.Failed() {
					return
				}
				if r.Source == core.FromStore && rng.IntN(3) == 0 {
					adm = append(adm, made{inst: i, a: core.Admission{Key: key, Limit: l, Cost: cost, At: r.At, Lease: hold}, ref: id})
				}
			}
			if r.Allowed && r.RetryAfter != 0 || r.Remaining < 0 {
				t.Fatalf("step %d: a malformed Result %+v", step, r)
			}
		}
	}
	return local, ref.n
}

// honest checks what a decision r from a block says against the store's
// own word on key now: the key is never said to be fresh sooner than the
// store says (At plus ResetAfter, the X-RateLimit-Reset instant), and
// Remaining never exceeds the capacity.
func honest(t *testing.T, store core.Store, key core.Key, l core.Limit, r core.Result) {
	t.Helper()
	if r.Source != core.FromStore || r.Remaining > l.Capacity() {
		if r.Remaining > l.Capacity() {
			t.Fatalf("Remaining %d over the capacity: %+v", r.Remaining, r)
		}
		return
	}
	p, err := limitertest.TakeOne(context.Background(), store, key, l, 0)
	if err != nil {
		t.Fatal(err)
	}
	if mine, its := r.At+int64(r.ResetAfter/time.Microsecond), p.At+int64(p.ResetAfter/time.Microsecond); mine < its-1 && p.ResetAfter > 0 {
		t.Fatalf("a decision says the key is fresh at %d, the store at %d: %+v, the store %+v", mine, its, r, p)
	}
}

// Random traces never admit more than the algorithm, for every algorithm
// a lease can take: over 8 seeds each, several instances, refunds, clock
// steps, sweeps and rebuilt instances. Each instance's clock steps back
// and forth on its own; the store's, the timeline replayed, moves on.
func TestRandomTracesNeverOverTheLimit(t *testing.T) {
	for _, a := range []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.GCRA, core.FixedWindow, core.SlidingWindowCounter} {
		t.Run(a.String(), func(t *testing.T) {
			local, total := 0, 0
			for seed := range uint64(8) {
				if v := os.Getenv("LEASE_SEED"); v != "" && v != fmt.Sprint(seed) {
					continue
				}
				l, n := runTrace(t, a, seed)
				local, total = local+l, total+n
			}
			t.Logf("%d admissions, %d of them decided in memory", total, local)
			if os.Getenv("LEASE_SEED") == "" && local < total/8 {
				t.Fatalf("only %d of %d admissions were decided in memory: the traces test little of the lease", local, total)
			}
		})
	}
}
