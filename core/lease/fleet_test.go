package lease_test

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/algo"
	"github.com/sluicehq/sluice/core/lease"
)

// event is an admission (its instant on the store's clock, µs, and its
// cost), or the refund of one. seq orders the events of every goroutine
// as they happened: an admission's is taken once its decision has
// returned, a refund's before it is asked for, so that an admission made
// with refunded units comes after the refund.
type event struct {
	seq, at, cost int64
	refunded      bool // an admission given back later (see its refund)
	refund        bool
}

// tally collects the events of many goroutines.
type tally struct {
	mu     sync.Mutex
	seq    int64
	events []event
}

// next returns the next sequence number.
func (t *tally) next() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seq++
	return t.seq
}

func (t *tally) add(e event) {
	t.mu.Lock()
	t.events = append(t.events, e)
	t.mu.Unlock()
}

// checkFleet checks events against the algorithm and returns the
// admissions. Every admission not given back later, replayed in the order
// of its instant, must be one the algorithm admits; for a bucket, every
// interval between two admissions holds at most Burst + Rate × the
// interval / Period units; for a window, no window counts more than Rate
// units kept, and, when the events are ordered (seq), none ever counts
// more than Rate units admitted and not yet given back, in the order
// things happened.
func checkFleet(t testing.TB, l core.Limit, events []event, ordered bool) int {
	t.Helper()
	var kept []event
	for _, e := range events {
		if !e.refund && !e.refunded {
			kept = append(kept, e)
		}
	}
	slices.SortStableFunc(kept, func(a, b event) int { return cmp.Compare(a.at, b.at) })
	sp := algo.MustCompile(l)
	var st algo.State
	for i, e := range kept {
		var o algo.Outcome
		sp.Step(&st, &o, e.at, e.cost)
		if !o.Allowed {
			t.Fatalf("over the limit %s: admission %d of %d, of %d at %d: the algorithm says %+v", l, i, len(kept), e.cost, e.at, sp.Result(&o))
		}
	}
	if l.Algorithm.Bucket() {
		checkIntervals(t, l, kept)
	} else {
		if ordered {
			checkWindows(t, l, events)
		}
		checkWindows(t, l, kept)
		logWindows(t, l, kept)
	}
	n := 0
	for _, e := range events {
		if !e.refund {
			n++
		}
	}
	return n
}

// logWindows logs the units kept per window (the first and last, which
// the run covers in part, left out).
func logWindows(t testing.TB, l core.Limit, kept []event) {
	t.Helper()
	p := int64(l.Period / time.Microsecond)
	count := map[int64]int64{}
	lo, hi := int64(1<<62), int64(0)
	for _, e := range kept {
		w := e.at / p
		count[w] += e.cost
		lo, hi = min(lo, w), max(hi, w)
	}
	var per []int64
	for w := lo + 1; w < hi; w++ {
		per = append(per, count[w])
	}
	t.Logf("units kept per window: %v", per)
}

// checkWindows: in the order things happened, no fixed window of l's
// period counts more than Rate units admitted and not given back (a
// sliding window counter never admits more than Rate in one window
// either).
func checkWindows(t testing.TB, l core.Limit, events []event) {
	t.Helper()
	slices.SortStableFunc(events, func(a, b event) int { return cmp.Compare(a.seq, b.seq) })
	p := int64(l.Period / time.Microsecond)
	count := map[int64]int64{}
	for _, e := range events {
		w := e.at / p
		if e.refund {
			count[w] -= e.cost
			continue
		}
		if count[w] += e.cost; count[w] > l.Rate {
			t.Fatalf("over the limit %s: window %d counts %d units", l, w, count[w])
		}
	}
}

// checkIntervals: in every interval [a, b] between two admissions, the
// units admitted are at most Burst + Rate × (b − a) / Period.
func checkIntervals(t testing.TB, l core.Limit, events []event) {
	t.Helper()
	var at, sum []int64 // admissions' instants, and the units admitted up to each
	total := int64(0)
	for _, e := range events {
		if !e.refund {
			total += e.cost
			at, sum = append(at, e.at), append(sum, total)
		}
	}
	if len(at) == 0 {
		return
	}
	p, t0 := int64(l.Period/time.Microsecond), at[0]
	// units in [at[i], at[j]] = sum[j] - sum[i-1]; scaled by p:
	// (sum[j] - sum[i-1])×p - rate×(at[j]-at[i]) ≤ capacity×p.
	g := func(j int) int64 { return sum[j]*p - l.Rate*(at[j]-t0) }
	best, bestJ := int64(-1<<62), -1
	for i := len(at) - 1; i >= 0; i-- {
		if g(i) > best {
			best, bestJ = g(i), i
		}
		before := int64(0)
		if i > 0 {
			before = sum[i-1]
		}
		if over := best - (before*p - l.Rate*(at[i]-t0)); over > l.Capacity()*p {
			t.Fatalf("over the limit %s: %d units in [%d, %d], more than burst + rate × interval", l, sum[bestJ]-before, at[i], at[bestJ])
		}
	}
}

// fleet is several lease layers over one store, deciding one key from
// goroutines of their own as fast as they can for a while.
type fleet struct {
	l       core.Limit
	hold    time.Duration
	insts   []*lease.Store
	workers int
	refunds bool // give back some admissions, as a failed response would
}

// run decides for d and returns what every goroutine saw.
func (f *fleet) run(t testing.TB, key core.Key, d time.Duration) (*tally, int64) {
	t.Helper()
	ctx := context.Background()
	tl := &tally{}
	var wg sync.WaitGroup
	var decisions sync.Map
	stop := time.Now().Add(d)
	for i, s := range f.insts {
		for w := range f.workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(i), uint64(w)))
				n := int64(0)
				for ; time.Now().Before(stop); n++ {
					f.decide(ctx, t, s, key, rng, tl)
				}
				decisions.Store(fmt.Sprint(i, w), n)
			}()
		}
	}
	wg.Wait()
	total := int64(0)
	decisions.Range(func(_, v any) bool { total += v.(int64); return true })
	return tl, total
}

func (f *fleet) decide(ctx context.Context, t testing.TB, s *lease.Store, key core.Key, rng *rand.Rand, tl *tally) {
	cost := int64(1)
	if rng.IntN(10) == 0 {
		cost = 2 + rng.Int64N(2)
	}
	var out [1]core.Result
	if err := s.Take(ctx, []core.Op{{Key: key, Limit: f.l, Cost: cost, Lease: f.hold}}, out[:]); err != nil {
		t.Error(err)
		return
	}
	r := out[0]
	if !r.Allowed {
		return
	}
	e := event{seq: tl.next(), at: r.At, cost: cost}
	if f.refunds && !f.l.Algorithm.Bucket() && rng.IntN(8) == 0 {
		tl.add(event{seq: tl.next(), at: r.At, cost: cost, refund: true})
		if err := s.Refund(ctx, core.Admission{Key: key, Limit: f.l, Cost: cost, At: r.At, Lease: f.hold}); err != nil {
			t.Error(err)
			return
		}
		e.refunded = true
	}
	tl.add(e)
}

// Four instances of three goroutines each decide one key as fast as they
// can, at many times its limit, with costs of 1 to 3 and refunds (for the
// windows), on one memory store and the real clocks: every admission is
// one the algorithm admits on the store's clock, and most decisions are
// made in memory.
func TestFleetNeverOverTheLimit(t *testing.T) {
	for _, c := range []struct {
		l    core.Limit
		hold time.Duration
	}{
		{core.Per(400, 20*time.Millisecond).WithAlgorithm(core.FixedWindow), 5 * time.Millisecond},
		{core.Per(400, 20*time.Millisecond).WithAlgorithm(core.SlidingWindowCounter), 5 * time.Millisecond},
		{core.Per(20, time.Millisecond).WithBurst(400), 5 * time.Millisecond},
		{core.Per(20, time.Millisecond).WithBurst(400).WithAlgorithm(core.GCRA), 5 * time.Millisecond},
		{core.Per(20, time.Millisecond).WithBurst(400).WithAlgorithm(core.LeakyBucket), 5 * time.Millisecond},
	} {
		t.Run(c.l.Algorithm.String(), func(t *testing.T) {
			mem := newMemory(t, time.Now)
			f := &fleet{l: c.l, hold: c.hold, workers: 3, refunds: true}
			for range 4 {
				f.insts = append(f.insts, newLease(t, mem))
			}
			tl, decisions := f.run(t, core.Key{Identity: t.Name(), Policy: "p"}, 300*time.Millisecond)
			admitted := checkFleet(t, c.l, tl.events, true)
			var takes, local uint64
			for _, s := range f.insts {
				st := s.Stats()
				takes, local = takes+st.Takes, local+st.Local
			}
			t.Logf("%d decisions, %d admitted, %d store calls, %d decided from blocks", decisions, admitted, takes, local)
			if local == 0 || float64(takes) > 0.5*float64(decisions) {
				t.Fatalf("%d store calls for %d decisions (%d from blocks): the lease did not decide in memory", takes, decisions, local)
			}
		})
	}
}
