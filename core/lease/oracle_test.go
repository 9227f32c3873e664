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

// trace is one random trace: m instances (lease layers over one memory
// store, on one manual clock, each instance's clock stepping on its own)
// deciding one key at, under and over its limit, with costs of 1 to 3 and
// peeks, the clock moving on, stepping back and jumping, refunds of
// earlier admissions, sweeps that end blocks, and instances closed and
// rebuilt mid-block.
type trace struct {
	t       *testing.T
	rng     *rand.Rand
	a       core.Algorithm
	l       core.Limit
	hold    time.Duration
	clock   *clocks
	mem     core.Store
	insts   []*lease.Store
	weights []int // each instance's share of the traffic
	key     core.Key
	ref     *reference
	adm     []made // admissions that may be refunded
	local   int    // decisions from blocks of the instances closed so far
	hist    []string
}

func newTrace(t *testing.T, a core.Algorithm, seed uint64) *trace {
	rng := rand.New(rand.NewPCG(seed, uint64(a)))
	l := traceLimit(a, rng)
	m := 2 + rng.IntN(4)
	tr := &trace{t: t, rng: rng, a: a, l: l, hold: time.Duration(5+rng.IntN(300)) * time.Millisecond,
		clock: &clocks{store: limitertest.NewClock(), off: make([]time.Duration, m)}, key: limitertest.Key(t), ref: newReference(t, l)}
	tr.mem = newMemory(t, tr.clock.store.Now)
	for i := range m {
		tr.insts = append(tr.insts, tr.build(i))
		tr.weights = append(tr.weights, 1+rng.IntN(8))
	}
	return tr
}

// build returns instance i's lease layer.
func (tr *trace) build(i int) *lease.Store {
	s, err := lease.New(tr.mem, lease.WithClock(tr.clock.instance(i)), lease.WithSweepInterval(time.Hour), lease.WithShare(0.1+0.9*tr.rng.Float64()))
	if err != nil {
		tr.t.Fatal(err)
	}
	return s
}

// pick returns an instance, by the weights.
func (tr *trace) pick() int {
	x := tr.rng.IntN(100 * len(tr.weights))
	for {
		for i, w := range tr.weights {
			if x < w {
				return i
			}
			x -= w
		}
	}
}

func (tr *trace) logf(format string, args ...any) {
	if os.Getenv("LEASE_DEBUG") != "" {
		tr.hist = append(tr.hist, fmt.Sprintf(format, args...))
	}
}

// run plays steps steps and returns the decisions made from blocks and
// the admissions.
func (tr *trace) run(steps int) (local, total int) {
	defer tr.close()
	for step := range steps {
		for _, s := range tr.insts {
			s.Tick() // the clocks are read all the time, as traffic reads them
		}
		tr.step(step)
		if tr.t.Failed() {
			break
		}
	}
	for _, s := range tr.insts {
		tr.local += int(s.Stats().Local)
	}
	return tr.local, tr.ref.n
}

func (tr *trace) close() {
	for _, s := range tr.insts {
		_ = s.Close()
	}
	if tr.t.Failed() {
		for _, h := range tr.hist[max(0, len(tr.hist)-80):] {
			tr.t.Log(h)
		}
	}
}

// step plays one random step.
func (tr *trace) step(step int) {
	rng, m, period := tr.rng, len(tr.insts), int64(tr.l.Period)
	interval := int64(tr.l.Period / time.Duration(tr.l.Rate))
	us := func(d int64) time.Duration { return time.Duration(d).Truncate(time.Microsecond) }
	tr.logf("step %d at %d", step, tr.clock.now())
	switch x := rng.IntN(100); {
	case x < 30:
		tr.clock.store.Advance(us(rng.Int64N(2 * interval)))
	case x < 32:
		tr.clock.step(rng.IntN(m), -us(rng.Int64N(period)))
	case x < 33:
		tr.clock.step(rng.IntN(m), us(rng.Int64N(3*period)))
	case x < 34:
		tr.clock.store.Advance(us(rng.Int64N(3 * period)))
	case x < 38 && len(tr.adm) > 0:
		tr.refund()
	case x < 39:
		i := rng.IntN(m)
		tr.local += int(tr.insts[i].Stats().Local)
		_ = tr.insts[i].Close()
		tr.insts[i] = tr.build(i) // its admissions are refunded through the new one
	case x < 41:
		tr.insts[rng.IntN(m)].Sweep()
	default:
		tr.decide(step)
	}
}

// refund gives back a random earlier admission through the instance that
// made it.
func (tr *trace) refund() {
	j := tr.rng.IntN(len(tr.adm))
	d := tr.adm[j]
	tr.adm = append(tr.adm[:j], tr.adm[j+1:]...)
	if err := tr.insts[d.inst].Refund(context.Background(), d.a); err != nil {
		tr.t.Fatal(err)
	}
	if !tr.a.Bucket() { // a leased bucket's refund gives nothing back
		tr.ref.refund(tr.clock.now(), d.ref)
	}
}

// decide makes one decision at a random instance and replays it.
func (tr *trace) decide(step int) {
	i, cost := tr.pick(), int64(1)
	switch y := tr.rng.IntN(20); {
	case y == 0:
		cost = 0
	case y < 3:
		cost = 2 + tr.rng.Int64N(2)
	}
	var out [1]core.Result
	op := core.Op{Key: tr.key, Limit: tr.l, Cost: cost, Lease: tr.hold}
	if err := tr.insts[i].Take(context.Background(), []core.Op{op}, out[:]); err != nil {
		tr.t.Fatal(err)
	}
	r := out[0]
	tr.logf("  instance %d cost %d: %+v %+v", i, cost, r, tr.insts[i].Stats())
	honest(tr.t, tr.mem, tr.key, tr.l, r)
	if r.Allowed && r.RetryAfter != 0 || r.Remaining < 0 {
		tr.t.Fatalf("step %d: a malformed Result %+v", step, r)
	}
	if !r.Allowed || cost == 0 {
		return
	}
	id := tr.ref.admit(tr.clock.now(), cost, fmt.Sprintf("%s %s hold %s, step %d, instance %d", tr.a, tr.l, tr.hold, step, i))
	if r.Source == core.FromStore && tr.rng.IntN(3) == 0 {
		tr.adm = append(tr.adm, made{inst: i, a: core.Admission{Key: tr.key, Limit: tr.l, Cost: cost, At: r.At, Lease: tr.hold}, ref: id})
	}
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
				l, n := newTrace(t, a, seed).run(2000)
				local, total = local+l, total+n
			}
			t.Logf("%d admissions, %d of them decided in memory", total, local)
			if os.Getenv("LEASE_SEED") == "" && local < total/8 {
				t.Fatalf("only %d of %d admissions were decided in memory: the traces test little of the lease", local, total)
			}
		})
	}
}
