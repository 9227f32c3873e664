package algo

import (
	"fmt"
	"math"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/exact"
)

// Spec is a Limit compiled for the step functions, with the warning
// thresholds expressed in the algorithm's own consumption units. Build one
// with Compile; a Spec is immutable and safe to share.
type Spec struct {
	Limit     core.Limit
	Algorithm core.Algorithm
	// Capacity is the most events admitted at once (Burst or Rate).
	Capacity int64
	// Period is the Limit's period in µs.
	Period int64
	// Q is the number of time units per µs for the buckets (1 for windows).
	Q int64
	// T is the bucket emission interval in units (Period/Rate µs, exact).
	T int64
	// Full is the consumption at 100% usage: Capacity×T for the buckets,
	// Rate for the fixed window and the log, Rate×Period for the counter.
	Full int64
	// WarnAbove: a Normal key turns Warning when consumption exceeds it.
	WarnAbove int64
	// ClearBelow: a Warning key turns Normal when consumption is below it.
	ClearBelow int64
	// maxGap bounds the TAT gap multiplied by Q (a clock stepped back by
	// years must not overflow).
	maxGap int64
}

// Compile validates l and th and returns the Spec of l.
func Compile(l core.Limit, th core.Thresholds) (Spec, error) {
	if err := l.Validate(); err != nil {
		return Spec{}, err
	}
	th = th.OrDefault()
	if err := th.Validate(); err != nil {
		return Spec{}, err
	}
	sp := Spec{Limit: l, Algorithm: l.Algorithm, Capacity: l.Capacity(), Period: int64(l.Period / time.Microsecond), Q: 1}
	switch {
	case l.Algorithm.Bucket():
		g := exact.GCD(sp.Period, l.Rate)
		sp.Q, sp.T = l.Rate/g, sp.Period/g
		sp.Full = sp.Capacity * sp.T
		sp.maxGap = exact.Max / sp.Q
	case l.Algorithm == core.SlidingWindowCounter:
		sp.Full = l.Rate * sp.Period
	default:
		sp.Full = l.Rate
	}
	warn, clear := permille(th.Warn), permille(th.Clear)
	sp.WarnAbove = mulDiv(sp.Full, warn, false)
	sp.ClearBelow = mulDiv(sp.Full, clear, true)
	return sp, nil
}

// MustCompile is Compile for limits known to be valid; it panics otherwise.
// Use it in tests and examples only.
func MustCompile(l core.Limit) Spec {
	sp, err := Compile(l, core.Thresholds{})
	if err != nil {
		panic(fmt.Sprintf("algo.MustCompile: %v", err))
	}
	return sp
}

func permille(f float64) int64 { return int64(math.Round(f * 1000)) }

// mulDiv returns floor (or ceil) of full×pm/1000 without overflow.
func mulDiv(full, pm int64, ceil bool) int64 {
	q, r := full/1000*pm, full%1000*pm
	q += r / 1000
	if ceil && r%1000 != 0 {
		q++
	}
	return q
}

// State is the stored state of a key for every algorithm but the log: two
// integers and the warning state. Expire is the instant (µs) at which the key
// is fresh again, zero for a fresh key; V's meaning depends on the algorithm
// (the sub-µs remainder of the TAT, a count, or two packed counts).
type State struct {
	Expire int64
	V      int64
	State  core.State // the warning state
}

// Outcome is a decision in the algorithm's units; Spec.Result turns it into a
// core.Result. The Redis scripts return the same fields, so both stores share
// the conversion.
type Outcome struct {
	Allowed   bool
	Remaining int64
	// Retry and Reset are in time units (1/Q µs), but for a bucket past
	// the clamp of a large backward step, whose waits are in µs, encoded
	// by Micros (values below -1). Retry is the wait until the cost would
	// be admitted when denied, -1 for never; when admitted, the wait until
	// the slot of a booking (see Book), zero for an admission now.
	Retry, Reset int64
	// State is the warning state after the decision, Previous the one
	// before (core.Result's State and Previous).
	State, Previous core.State
	// At is the instant (µs) the decision was made at: now, or, when the
	// clock stepped back behind the key's state, the instant that state
	// records (see the package doc, "Clock steps"); for a booking, its slot
	// (now plus the wait in Retry). An admission is recorded at At, and a
	// refund names it by At.
	At int64
}

// Result converts o into a core.Result, rounding durations up to the whole
// microsecond (the clock's resolution), so that a request of the same cost
// at exactly now+RetryAfter is admitted and the key is fresh at exactly
// now+ResetAfter. An admitted booking's RetryAfter is the wait until its
// slot (zero for every other admission).
func (sp *Spec) Result(o *Outcome) core.Result {
	var r core.Result
	sp.SetResult(&r, o)
	return r
}

// SetResult sets *r to Result(o), writing it in place.
func (sp *Spec) SetResult(r *core.Result, o *Outcome) {
	var retry time.Duration
	switch {
	case o.Retry == -1:
		retry = core.RetryNever
	case o.Retry != 0:
		retry = sp.Duration(o.Retry)
	}
	r.Allowed, r.State, r.Previous, r.Source = o.Allowed, o.State, o.Previous, 0
	r.Capacity, r.Remaining, r.At = sp.Capacity, o.Remaining, o.At
	r.RetryAfter, r.ResetAfter = retry, sp.Duration(o.Reset)
	r.Applied, r.Override = nil, 0
}

// Micros encodes a wait of us µs in an Outcome's Retry or Reset, for a
// bucket whose waits in units would be past 2^53 (a clock stepped back
// behind the clamp): -2 - us, below -1 (which is never). The Redis scripts
// encode it the same way.
func Micros(us int64) int64 { return -2 - us }

// Duration converts x time units into a Duration, rounded up to the whole
// microsecond: instants are whole µs, so a wait that ends between two of
// them ends, for the store, at the later one. A wait encoded by Micros is
// its µs.
func (sp *Spec) Duration(x int64) time.Duration {
	if x <= 0 && x >= -1 {
		return 0
	}
	us := x
	switch {
	case x < -1:
		us = -2 - x
	case sp.Q != 1:
		us = x / sp.Q
		if x%sp.Q != 0 {
			us++
		}
	}
	if us > math.MaxInt64/1000 {
		return core.RetryNever
	}
	return time.Duration(us * 1000)
}

// nextState is the warning-state machine: used is the consumption after the
// decision.
func (sp *Spec) nextState(prevState core.State, allowed bool, used int64) core.State {
	switch {
	case !allowed:
		return core.Throttled
	case prevState == core.Normal:
		if used > sp.WarnAbove {
			return core.Warning
		}
		return core.Normal
	case used < sp.ClearBelow:
		return core.Normal
	default:
		return core.Warning
	}
}

// never fills the Outcome of a cost above the capacity: denied, nothing
// changed, no wait that could help.
func never(o *Outcome, remaining, reset int64, prevState core.State, at int64) {
	*o = Outcome{Remaining: max(remaining, 0), Retry: -1, Reset: reset, State: core.Throttled, Previous: prevState, At: at}
}

// Step decides one request for every algorithm but SlidingWindowLog (see
// StepLog): given the key's state st at instant now, it updates st in place
// and writes the decision to o. It depends on nothing else. (Pointers, not
// values: copying freshly written structs stalls the CPU's store forwarding
// on the hot path.)
func (sp *Spec) Step(st *State, o *Outcome, now, cost int64) {
	if cost == 0 { // a peek works on a copy: it changes nothing
		peek := *st
		st = &peek
	}
	switch sp.Algorithm {
	case core.FixedWindow:
		sp.fixedWindow(st, o, now, cost)
	case core.SlidingWindowCounter:
		sp.slidingCounter(st, o, now, cost)
	case core.SlidingWindowLog:
		panic("algo: Step called for sliding_window_log; use StepLog")
	default:
		sp.bucket(st, o, now, cost, 0)
	}
}
