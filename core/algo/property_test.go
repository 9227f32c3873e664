package algo_test

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/algo"
	"github.com/sluicehq/sluice/core/limitertest"
)

// model is an independent, naive implementation of one algorithm in exact
// rationals, used as the reference for the step functions.
type model interface {
	// decide returns the result at now without changing anything, and a
	// commit that applies it.
	decide(now, cost int64) (core.Result, func())
}

// ceilUs converts a rational number of µs into a Duration, rounded up to
// the whole µs (the clock's resolution).
func ceilUs(x *big.Rat) time.Duration {
	q, r := new(big.Int).QuoRem(x.Num(), x.Denom(), new(big.Int))
	if r.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return time.Duration(q.Int64()) * time.Microsecond
}

func floorRat(x *big.Rat) int64 {
	return new(big.Int).Quo(x.Num(), x.Denom()).Int64()
}

// levelModel is the warning-state machine over a usage fraction.
type levelModel struct{ s core.State }

func (m *levelModel) next(allowed bool, used *big.Rat) core.State {
	warn, clear := big.NewRat(8, 10), big.NewRat(7, 10)
	switch {
	case !allowed:
		return core.Throttled
	case m.s == core.Normal:
		if used.Cmp(warn) > 0 {
			return core.Warning
		}
		return core.Normal
	case used.Cmp(clear) < 0:
		return core.Normal
	}
	return core.Warning
}

// tokenModel is the token-bucket view: tokens refill at rate/period µs.
type tokenModel struct {
	l      core.Limit
	tokens *big.Rat
	last   int64
	lv     levelModel
}

func newTokenModel(l core.Limit) *tokenModel {
	return &tokenModel{l: l, tokens: big.NewRat(l.Capacity(), 1)}
}

func (m *tokenModel) decide(now, cost int64) (core.Result, func()) {
	b := big.NewRat(m.l.Capacity(), 1)
	perUs := big.NewRat(m.l.Rate, int64(m.l.Period/time.Microsecond)) // tokens per µs
	tok := new(big.Rat).Add(m.tokens, new(big.Rat).Mul(big.NewRat(max(now-m.last, 0), 1), perUs))
	if tok.Cmp(b) >= 0 {
		tok = b
		m.lv.s = core.Normal // a full bucket is a fresh key
	}
	need := big.NewRat(max(cost, 1), 1)
	res := core.Result{Capacity: m.l.Capacity(), Allowed: tok.Cmp(need) >= 0 && cost <= m.l.Capacity(), Previous: m.lv.s}
	after := tok
	if res.Allowed && cost > 0 {
		after = new(big.Rat).Sub(tok, need)
	}
	res.Remaining = floorRat(after)
	wait := func(x *big.Rat) time.Duration { return ceilUs(new(big.Rat).Quo(x, perUs)) }
	res.ResetAfter = wait(new(big.Rat).Sub(b, after))
	switch {
	case cost > m.l.Capacity():
		res.RetryAfter = core.RetryNever
	case !res.Allowed:
		res.RetryAfter = wait(new(big.Rat).Sub(need, tok))
	}
	used := new(big.Rat).Quo(new(big.Rat).Sub(b, after), b)
	res.State = m.lv.next(res.Allowed, used)
	if cost > m.l.Capacity() {
		res.State = core.Throttled
	}
	return res, func() {
		if cost == 0 || cost > m.l.Capacity() {
			return
		}
		if res.Allowed {
			m.tokens, m.last = after, max(now, m.last)
		}
		m.lv.s = res.State
	}
}

// leakyModel is the leaky-bucket view: the level drains at rate/period µs.
type leakyModel struct {
	l     core.Limit
	level *big.Rat
	last  int64
	lv    levelModel
}

func (m *leakyModel) decide(now, cost int64) (core.Result, func()) {
	b := big.NewRat(m.l.Capacity(), 1)
	perUs := big.NewRat(m.l.Rate, int64(m.l.Period/time.Microsecond))
	lvl := new(big.Rat).Sub(m.level, new(big.Rat).Mul(big.NewRat(max(now-m.last, 0), 1), perUs))
	if lvl.Sign() <= 0 {
		lvl = new(big.Rat)
		m.lv.s = core.Normal
	}
	need := big.NewRat(max(cost, 1), 1)
	res := core.Result{Capacity: m.l.Capacity(), Allowed: new(big.Rat).Add(lvl, need).Cmp(b) <= 0, Previous: m.lv.s}
	after := lvl
	if res.Allowed && cost > 0 {
		after = new(big.Rat).Add(lvl, need)
	}
	res.Remaining = floorRat(new(big.Rat).Sub(b, after))
	drain := func(x *big.Rat) time.Duration { return ceilUs(new(big.Rat).Quo(x, perUs)) }
	res.ResetAfter = drain(after)
	switch {
	case cost > m.l.Capacity():
		res.RetryAfter, res.Allowed = core.RetryNever, false
	case !res.Allowed:
		res.RetryAfter = drain(new(big.Rat).Sub(new(big.Rat).Add(lvl, need), b))
	}
	res.State = m.lv.next(res.Allowed, new(big.Rat).Quo(after, b))
	return res, func() {
		if cost == 0 || cost > m.l.Capacity() {
			return
		}
		if res.Allowed {
			m.level, m.last = after, max(now, m.last)
		}
		m.lv.s = res.State
	}
}

// gcraModel is the GCRA view: a theoretical arrival time.
type gcraModel struct {
	l   core.Limit
	tat *big.Rat // µs
	lv  levelModel
}

func (m *gcraModel) decide(now, cost int64) (core.Result, func()) {
	T := big.NewRat(int64(m.l.Period/time.Microsecond), m.l.Rate)
	tau := new(big.Rat).Mul(T, big.NewRat(m.l.Capacity(), 1))
	n := big.NewRat(now, 1)
	tat := m.tat
	if tat == nil || tat.Cmp(n) <= 0 {
		tat = n
		m.lv.s = core.Normal
	}
	debt := new(big.Rat).Sub(tat, n)
	inc := new(big.Rat).Mul(T, big.NewRat(max(cost, 1), 1))
	newDebt := new(big.Rat).Add(debt, inc)
	res := core.Result{Capacity: m.l.Capacity(), Allowed: newDebt.Cmp(tau) <= 0, Previous: m.lv.s}
	after := debt
	if res.Allowed && cost > 0 {
		after = newDebt
	}
	res.Remaining = floorRat(new(big.Rat).Quo(new(big.Rat).Sub(tau, after), T))
	res.ResetAfter = ceilUs(after)
	switch {
	case cost > m.l.Capacity():
		res.RetryAfter, res.Allowed = core.RetryNever, false
	case !res.Allowed:
		res.RetryAfter = ceilUs(new(big.Rat).Sub(newDebt, tau))
	}
	res.State = m.lv.next(res.Allowed, new(big.Rat).Quo(after, tau))
	return res, func() {
		if cost == 0 || cost > m.l.Capacity() {
			return
		}
		if res.Allowed {
			m.tat = new(big.Rat).Add(n, after)
		}
		m.lv.s = res.State
	}
}

// windowModel covers the fixed window, the log and the counter with a list
// of admissions; retry waits are found by searching µs by µs.
type windowModel struct {
	l    core.Limit
	kind core.Algorithm
	at   []int64 // one entry per admitted unit
	lv   levelModel
	last int64
}

func (m *windowModel) P() int64 { return int64(m.l.Period / time.Microsecond) }

// used returns the consumption at now as a fraction of Rate (a count for
// the log and the fixed window, the weighted estimate for the counter).
func (m *windowModel) used(now int64) *big.Rat {
	P := m.P()
	now = max(now, m.last)
	switch m.kind {
	case core.FixedWindow:
		n := int64(0)
		for _, t := range m.at {
			if t/P == now/P {
				n++
			}
		}
		return big.NewRat(n, 1)
	case core.SlidingWindowLog:
		n := int64(0)
		for _, t := range m.at {
			if t > now-P {
				n++
			}
		}
		return big.NewRat(n, 1)
	}
	w := now / P
	var prev, cur int64
	for _, t := range m.at {
		switch t / P {
		case w:
			cur++
		case w - 1:
			prev++
		}
	}
	e := now - w*P
	est := new(big.Rat).Mul(big.NewRat(prev, 1), big.NewRat(P-e, P))
	return est.Add(est, big.NewRat(cur, 1))
}

func (m *windowModel) allows(now, need int64) bool {
	u := m.used(now)
	return u.Add(u, big.NewRat(need, 1)).Cmp(big.NewRat(m.l.Rate, 1)) <= 0
}

// firstAt returns the first instant >= from at which ok holds. Without new
// admissions usage never grows, so ok is monotone and 3 periods suffice.
func (m *windowModel) firstAt(from int64, ok func(int64) bool) int64 {
	lo, hi := from, from+3*m.P()
	for lo < hi {
		mid := lo + (hi-lo)/2
		if ok(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// freshAt returns the first instant >= now at which used is zero.
func (m *windowModel) freshAt(now int64) int64 {
	return m.firstAt(max(now, m.last), func(t int64) bool { return m.used(t).Sign() == 0 })
}

func (m *windowModel) decide(now, cost int64) (core.Result, func()) {
	r := m.l.Rate
	need := max(cost, 1)
	res := core.Result{Capacity: r, Allowed: cost <= r && m.allows(now, need), Previous: m.lv.s}
	n := max(now, m.last)
	extra := 0
	if res.Allowed && cost > 0 {
		extra = int(cost)
	}
	after := append(append([]int64(nil), m.at...), make([]int64, extra)...)
	for i := len(m.at); i < len(after); i++ {
		after[i] = n
	}
	mm := &windowModel{l: m.l, kind: m.kind, at: after, last: n}
	u := mm.used(now)
	res.Remaining = floorRat(new(big.Rat).Sub(big.NewRat(r, 1), u))
	res.ResetAfter = time.Duration(mm.freshAt(now)-now) * time.Microsecond
	switch {
	case cost > r:
		res.RetryAfter = core.RetryNever
	case !res.Allowed:
		t := m.firstAt(n, func(t int64) bool { return m.allows(t, need) })
		res.RetryAfter = time.Duration(t-now) * time.Microsecond
	}
	res.State = m.lv.next(res.Allowed, new(big.Rat).Quo(u, big.NewRat(r, 1)))
	if cost > r {
		res.State = core.Throttled
	}
	return res, func() {
		if cost == 0 || cost > r {
			return
		}
		if res.Allowed {
			m.at, m.last = after, n
			for len(m.at) > 0 && m.at[0] < n-3*m.P() { // long gone from every window
				m.at = m.at[1:]
			}
		}
		m.lv.s = res.State
		if mm.used(n).Sign() == 0 && !res.Allowed {
			m.lv.s = core.Throttled
		}
	}
}

// trace is a random sequence of (instant, cost) with mostly small steps.
func trace(rng *rand.Rand, n int, capacity, step int64) (at, cost []int64) {
	now := int64(1_700_000_000_000_000) + rng.Int64N(1_000_000)
	for range n {
		switch rng.IntN(10) {
		case 0:
			now += rng.Int64N(step * 20)
		case 1, 2:
		default:
			now += rng.Int64N(step)
		}
		c := int64(1)
		switch rng.IntN(8) {
		case 0:
			c = 0
		case 1:
			c = rng.Int64N(capacity + 2)
		}
		at, cost = append(at, now), append(cost, c)
	}
	return at, cost
}

// windowFresh reports whether a window model has forgotten everything, which
// resets the warning state as the stores do.
func resetIfFresh(m model, now int64) {
	if w, ok := m.(*windowModel); ok && w.used(now).Sign() == 0 && w.freshAt(now) == max(now, w.last) {
		w.lv.s = core.Normal
	}
}

func TestBucketsMatchExactModels(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 60 {
		rateN := 1 + rng.Int64N(20)
		period := time.Duration(1+rng.Int64N(3_000_000)) * time.Microsecond
		burst := rng.Int64N(12)
		for _, a := range []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.GCRA} {
			l := core.Per(rateN, period).WithBurst(burst).WithAlgorithm(a)
			sp := algo.MustCompile(l)
			models := []model{newTokenModel(l), &leakyModel{l: l, level: new(big.Rat)}, &gcraModel{l: l}}
			at, cost := trace(rng, 300, l.Capacity(), int64(period/time.Microsecond)/max(rateN, 1)*2+1)
			var st algo.State
			for i := range at {
				var o algo.Outcome
				sp.Step(&st, &o, at[i], cost[i])
				got := sp.Result(&o)
				must(t, got.At == at[i], "a bucket decides at now: %d, not %d", got.At, at[i])
				got.At = 0
				for mi, m := range models {
					want, commit := m.decide(at[i], cost[i])
					must(t, reflect.DeepEqual(want, got), "iter %d %s model %d step %d at %d cost %d:\nwant %+v\ngot  %+v", iter, l, mi, i, at[i], cost[i], want, got)
					commit()
				}
			}
		}
	}
}

func TestWindowsMatchModels(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := range 40 {
		for _, a := range []core.Algorithm{core.FixedWindow, core.SlidingWindowLog, core.SlidingWindowCounter} {
			l := core.Per(1+rng.Int64N(12), time.Duration(50+rng.Int64N(2000))*time.Microsecond).WithAlgorithm(a)
			sp := algo.MustCompile(l)
			m := &windowModel{l: l, kind: a}
			at, cost := trace(rng, 200, l.Rate, int64(l.Period/time.Microsecond)/l.Rate+1)
			r := &runner{sp: sp}
			for i := range at {
				resetIfFresh(m, at[i])
				got := r.take(at[i], cost[i])
				must(t, got.At >= at[i], "decided at %d, before now %d", got.At, at[i])
				got.At = 0
				want, commit := m.decide(at[i], cost[i])
				must(t, reflect.DeepEqual(want, got), "iter %d %s step %d at %d cost %d:\nwant %+v\ngot  %+v", iter, l, i, at[i], cost[i], want, got)
				commit()
			}
		}
	}
}

// admitted checks the promise of each algorithm over an admission record.
func checkPromise(t *testing.T, l core.Limit, at, n []int64) {
	t.Helper()
	P := int64(l.Period / time.Microsecond)
	switch {
	case l.Algorithm.Bucket():
		// Over any span [at[i], at[j]]: at most Burst + Rate×span/Period.
		for i := range at {
			var sum int64
			for j := i; j < len(at); j++ {
				sum += n[j]
				span := at[j] - at[i]
				if sum*P > l.Capacity()*P+l.Rate*span {
					require.Failf(t, "promise broken", "%s: %d admitted in %dµs", l, sum, span)
				}
			}
		}
	case l.Algorithm == core.SlidingWindowLog:
		for j := range at {
			var sum int64
			for i := j; i >= 0 && at[i] > at[j]-P; i-- {
				sum += n[i]
			}
			must(t, sum <= l.Rate, "%s: %d admitted in the window ending %d", l, sum, at[j])
		}
	default: // fixed window and counter: at most Rate per aligned window
		per := map[int64]int64{}
		for i := range at {
			per[at[i]/P] += n[i]
			must(t, per[at[i]/P] <= l.Rate, "%s: %d admitted in window %d", l, per[at[i]/P], at[i]/P)
		}
	}
}

func TestPromises(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	all := []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.GCRA, core.FixedWindow, core.SlidingWindowLog, core.SlidingWindowCounter}
	for iter := range 50 {
		for _, a := range all {
			l := core.Per(1+rng.Int64N(30), time.Duration(1+rng.Int64N(100_000))*time.Microsecond).WithAlgorithm(a)
			if a.Bucket() {
				l.Burst = rng.Int64N(40)
			}
			runPromise(t, l, rng, 400, iter)
		}
	}
}

func runPromise(t *testing.T, l core.Limit, rng *rand.Rand, n, iter int) {
	t.Helper()
	r := &runner{sp: algo.MustCompile(l)}
	at, cost := trace(rng, n, l.Capacity(), int64(l.Period/time.Microsecond)/l.Rate+1)
	var okAt, okN []int64
	P := int64(l.Period / time.Microsecond)
	for i := range at {
		before, beforeLog := r.st, r.clone().lg
		var res core.Result
		if l.Algorithm.Bucket() && rng.IntN(4) == 0 { // a booking, up to a few periods ahead
			var o algo.Outcome
			r.sp.Book(&r.st, &o, at[i], cost[i], rng.Int64N(4*P+1))
			res = r.sp.Result(&o)
			if res.Allowed {
				must(t, res.RetryAfter == time.Duration(res.At-at[i])*time.Microsecond, "the wait %s is not the slot at %d of %d", res.RetryAfter, res.At, at[i])
			}
		} else {
			res = r.take(at[i], cost[i])
		}
		if cost[i] == 0 || res.Never() {
			must(t, before == r.st, "a peek or a never-admissible cost changed the state: %+v to %+v", before, r.st)
			must(t, reflect.DeepEqual(beforeLog, r.lg), "a peek or a never-admissible cost changed the log: %+v to %+v", beforeLog, r.lg)
		}
		must(t, res.Remaining >= 0 && res.Remaining <= l.Capacity(), "iter %d: remaining %d of %d", iter, res.Remaining, l.Capacity())
		must(t, res.ResetAfter >= 0, "iter %d: reset after %s", iter, res.ResetAfter)
		if res.Allowed && cost[i] > 0 {
			if n := len(okAt); n > 0 && l.Algorithm.Bucket() {
				// the clock only moves forward: admissions, bookings
				// included, are recorded in the order they were made
				must(t, res.At >= okAt[n-1], "iter %d: served out of order", iter)
			}
			okAt, okN = append(okAt, res.At), append(okN, cost[i])
		}
		if !res.Allowed {
			must(t, res.RetryAfter > 0, "iter %d: denied with retry after %s", iter, res.RetryAfter)
			must(t, res.Never() == (cost[i] > l.Capacity()), "iter %d: cost %d of %d: never %v", iter, cost[i], l.Capacity(), res.Never())
		}
	}
	checkPromise(t, l, okAt, okN)
}

// TestTokenBucketMatchesXTimeRate drives x/time/rate's AllowN and the token
// bucket through the same traces. Instants are multiples of 1/64 s and rates
// powers of two per second, so x/time/rate's float64 arithmetic is exact and
// any difference is a real one.
func TestTokenBucketMatchesXTimeRate(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const tick = 15625 // µs: 1/64 s
	for iter := range 200 {
		r := int64(1) << rng.IntN(7)
		burst := 1 + rng.IntN(20)
		l := core.PerSecond(r).WithBurst(int64(burst))
		sp := algo.MustCompile(l)
		ref := rate.NewLimiter(rate.Limit(r), burst)
		base := time.Unix(1_700_000_000, 0)
		var st algo.State
		now := int64(0)
		for i := range 500 {
			now += tick * rng.Int64N(int64(1+rng.IntN(40)))
			n := 1 + rng.IntN(burst+1)
			if rng.IntN(4) == 0 {
				n = 1
			}
			var o algo.Outcome
			sp.Step(&st, &o, base.UnixMicro()+now, int64(n))
			want := ref.AllowN(base.Add(time.Duration(now)*time.Microsecond), n)
			must(t, want == o.Allowed, "iter %d step %d: rate %d burst %d n %d at %dµs: x/time/rate %v", iter, i, r, burst, n, now, want)
		}
	}
}

// FuzzStep checks the invariants of every algorithm on arbitrary limits and
// traces (bookings among them, for the buckets): no panic, results in
// range, admissions recorded in the order they were made, and the promise
// of each algorithm.
func FuzzStep(f *testing.F) {
	f.Add(uint8(1), uint16(10), uint32(1_000_000), uint8(0), uint64(1), []byte{1, 2, 3, 4, 5, 200, 7})
	f.Add(uint8(3), uint16(3), uint32(250), uint8(0), uint64(9), []byte{0, 0, 0, 255, 255, 1})
	f.Add(uint8(5), uint16(7), uint32(60_000_000), uint8(0), uint64(3), []byte{9, 9, 9, 9})
	f.Fuzz(func(t *testing.T, alg uint8, rateN uint16, periodUs uint32, burst uint8, seed uint64, ops []byte) {
		l := core.Per(int64(rateN), time.Duration(periodUs)*time.Microsecond).WithAlgorithm(core.Algorithm(alg%6 + 1))
		if l.Algorithm.Bucket() {
			l.Burst = int64(burst)
		}
		if l.Validate() != nil || len(ops) > 300 {
			return
		}
		runPromise(t, l, rand.New(rand.NewPCG(seed, uint64(len(ops)))), len(ops), 0)
	})
}

// undo undoes the admission of cost whose Outcome is o, on the runner's key.
func (r *runner) undo(now, cost int64, o *algo.Outcome) {
	if r.sp.Algorithm == core.SlidingWindowLog {
		r.sp.UndoLog(&r.lg, now, cost, o)
	} else {
		r.sp.Undo(&r.st, now, cost, o)
	}
}

// takeO is take that also returns the Outcome.
func (r *runner) takeO(now, cost int64) (core.Result, algo.Outcome) {
	var o algo.Outcome
	if r.sp.Algorithm == core.SlidingWindowLog {
		r.sp.StepLog(&r.lg, &o, now, cost)
	} else {
		r.sp.Step(&r.st, &o, now, cost)
	}
	return r.sp.Result(&o), o
}

// bookO is takeO for a booking (Book; the windows Step).
func (r *runner) bookO(now, cost, maxDelay int64) (core.Result, algo.Outcome) {
	if r.sp.Algorithm == core.SlidingWindowLog {
		return r.takeO(now, cost)
	}
	var o algo.Outcome
	r.sp.Book(&r.st, &o, now, cost, maxDelay)
	return r.sp.Result(&o), o
}

// refund undoes the admission of cost decided at at, on the runner's key.
func (r *runner) refund(now, cost, at int64) {
	if r.sp.Algorithm == core.SlidingWindowLog {
		r.sp.RefundLog(&r.lg, now, cost, at)
	} else {
		r.sp.Refund(&r.st, now, cost, at)
	}
}

// history is what a random trace did, formatted only when a promise breaks.
type history []traceStep

// traceStep is one step of a trace: a take (n its cost), a refund or undo
// of n admitted at at, or the start of a fresh key; res is the take's
// Result, or a peek's after the refund.
type traceStep struct {
	now, n, at int64
	kind       string
	booked     bool
	res        core.Result
}

func (tr history) String() string {
	var b strings.Builder
	for _, s := range tr {
		switch s.kind {
		case "-- fresh":
			b.WriteString(s.kind)
		case "take":
			fmt.Fprintf(&b, "%d: take %d (booked %v): %+v", s.now, s.n, s.booked, s.res)
		case "refund it at once":
			fmt.Fprintf(&b, "%d: %s: %+v", s.now, s.kind, s.res)
		default:
			fmt.Fprintf(&b, "%d: %s %d of %d: %+v", s.now, s.kind, s.n, s.at, s.res)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// Random traces of takes, bookings (Book, up to a few periods ahead; the
// windows Step), refunds of earlier admissions (in any order) and clock
// steps both ways, small and large, within and across windows: no
// algorithm ever admits more than its promise (limitertest.CheckPromise, an
// exact model of each promise) on the instants the admissions are recorded
// at (a booking's slot), every decision is made at or after now, and a
// refund made at once restores exactly what a peek saw before the
// admission (a booking whose slot was rounded up to the µs: at least as
// full, and less than one µs more). Undos (Undo, UndoLog: the Redis store's
// compensation) of recent admissions, a few steps later, never over-admit
// either.
func TestRefundsAndClockStepsKeepPromises(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	all := []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.GCRA, core.FixedWindow, core.SlidingWindowLog, core.SlidingWindowCounter}
	steps, bookings := 0, 0
	for iter := range 60 {
		for _, a := range all {
			l := core.Per(1+rng.Int64N(20), time.Duration(1+rng.Int64N(3_000_000))*time.Microsecond).WithAlgorithm(a)
			if a.Bucket() {
				l.Burst = rng.Int64N(25)
				if iter%5 == 4 { // a large rate: the TAT clamp is a few seconds away
					l = core.Limit{Algorithm: a, Rate: 999_999_937, Period: 1000 * time.Second, Burst: 1 + rng.Int64N(9_000_000)}
				}
			}
			r := &runner{sp: algo.MustCompile(l)}
			P := int64(l.Period / time.Microsecond)
			step := max(P/l.Rate*2, 2)
			now := int64(1_700_000_000_000_000) + rng.Int64N(P)
			var adm []limitertest.Admission
			var refunded []bool
			var outs []algo.Outcome // of adm
			// A key whose state is gone (fresh: expired, or refunded to
			// nothing) records no instant: what it admits next is checked as
			// a new key's (see docs/algorithms.md, "Clock steps").
			var epochs [][]limitertest.Admission
			var hist history // what the trace did, shown when a promise breaks
			freshAt := int64(0)
			// A bucket refund made behind an admission of a stepped-back
			// clock that left the bucket less than full (a take, not a
			// booking) can give back up to the step too much (see
			// docs/algorithms.md, "Refunds"): the check restarts after it.
			var lastTake int64
			newEpoch := func() {
				var kept []limitertest.Admission
				for j := range adm {
					if !refunded[j] {
						kept = append(kept, adm[j])
					}
				}
				epochs, adm, refunded, outs, lastTake = append(epochs, kept), nil, nil, nil, 0
				hist = append(hist, traceStep{kind: "-- fresh"})
			}
			for i := range 400 {
				steps++
				switch rng.IntN(14) {
				case 0:
					now += rng.Int64N(3 * P)
				case 1:
					now -= rng.Int64N(step)
				case 2:
					now -= rng.Int64N(3 * P)
				case 3:
					now -= rng.Int64N(int64(time.Hour / time.Microsecond))
				case 4, 5:
				default:
					now += rng.Int64N(step)
				}
				if now >= freshAt { // the store may have forgotten the key
					newEpoch()
				}
				if len(adm) > 0 && rng.IntN(5) == 0 {
					j := rng.IntN(len(adm))
					if rng.IntN(2) == 0 { // one of the last few: a compensation
						j = max(len(adm)-1-rng.IntN(3), 0)
					}
					if !refunded[j] {
						refunded[j] = true
						kind := "refund"
						if rng.IntN(2) == 0 {
							r.undo(now, adm[j].N, &outs[j])
							kind = "undo"
						} else {
							r.refund(now, adm[j].N, adm[j].At)
						}
						peek := r.take(now, 0)
						hist = append(hist, traceStep{now: now, kind: kind, n: adm[j].N, at: adm[j].At, res: peek})
						if freshAt = now + int64(peek.ResetAfter/time.Microsecond); peek.ResetAfter == 0 || a.Bucket() && now < lastTake {
							newEpoch()
						}
					}
					continue
				}
				cost := int64(1)
				switch rng.IntN(8) {
				case 0:
					cost = 0
				case 1:
					cost = rng.Int64N(min(l.Capacity(), 30) + 2)
				case 2:
					cost = l.Capacity()
				}
				before := r.take(now, 0)
				var res core.Result
				var out algo.Outcome
				booked := rng.IntN(3) == 0
				if !booked {
					res, out = r.takeO(now, cost)
				} else {
					maxDelay := rng.Int64N(3 * P)
					if rng.IntN(10) == 0 {
						maxDelay = r.sp.MaxDelay()
					}
					res, out = r.bookO(now, cost, maxDelay)
					if res.Allowed && a.Bucket() {
						require.LessOrEqual(t, res.At-now, maxDelay, "%s step %d: booked beyond the bound", l, i)
						require.Equal(t, time.Duration(res.At-now)*time.Microsecond, res.RetryAfter, "%s step %d: the wait is the slot", l, i)
						bookings++
					}
				}
				if res.At < now { // plain: require on every step was a third of the time
					t.Fatalf("%s step %d: decided at %d, before now %d", l, i, res.At, now)
				}
				hist = append(hist, traceStep{now: now, kind: "take", n: cost, booked: booked, res: res})
				freshAt = now + int64(res.ResetAfter/time.Microsecond) // the key's, whatever came before
				if !res.Allowed || cost == 0 {
					continue
				}
				if rng.IntN(6) == 0 { // refunded at once: as if it had not been
					r.refund(now, cost, res.At)
					after := r.take(now, 0)
					hist = append(hist, traceStep{now: now, kind: "refund it at once", res: after})
					before.State, before.Previous, after.State, after.Previous = 0, 0, 0, 0
					if booked && res.At > now && r.sp.Q > 1 { // the slot was rounded up: within a µs
						require.GreaterOrEqual(t, after.ResetAfter, before.ResetAfter, "%s step %d: an immediate cancel of %d", l, i, cost)
						require.LessOrEqual(t, after.ResetAfter, before.ResetAfter+time.Microsecond, "%s step %d: an immediate cancel of %d", l, i, cost)
						require.LessOrEqual(t, after.Remaining, before.Remaining)
						after.ResetAfter, after.Remaining, after.RetryAfter = before.ResetAfter, before.Remaining, before.RetryAfter
						after.Allowed = before.Allowed
					}
					require.Equal(t, before, after, "%s step %d: an immediate refund of %d", l, i, cost)
					if freshAt = now + int64(after.ResetAfter/time.Microsecond); after.ResetAfter == 0 {
						newEpoch()
					}
					continue
				}
				adm, refunded, outs = append(adm, limitertest.Admission{At: res.At, N: cost}), append(refunded, false), append(outs, out)
				if res.At == now {
					lastTake = max(lastTake, now)
				}
			}
			newEpoch()
			for _, kept := range epochs {
				if err := limitertest.CheckPromise(l, kept); err != nil {
					t.Fatalf("iter %d: %v\n%s", iter, err, hist)
				}
			}
		}
	}
	t.Logf("%d steps, %d bookings admitted", steps, bookings)
	require.Greater(t, bookings, 1000, "the trace books")
}
