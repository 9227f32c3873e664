package remotestore

import (
	"bytes"
	"math"
	"time"
	"unsafe"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/ratelimitv1"
)

// setDuration writes d into p without allocating.
func setDuration(p *durationpb.Duration, d time.Duration) {
	p.Seconds = int64(d / time.Second)
	p.Nanos = int32(d % time.Second)
}

// duration reads p (nil is zero). It reports false for a Duration that is
// not valid (its seconds and nanos out of range or of opposite signs); one
// beyond the range of time.Duration saturates, which the store then
// rejects as too long.
func duration(p *durationpb.Duration) (time.Duration, bool) {
	if p == nil {
		return 0, true
	}
	if p.CheckValid() != nil {
		return 0, false
	}
	return p.AsDuration(), true
}

// bytesOf returns s's bytes without copying them: the message holding them
// is only read (marshalled) while s is alive, and cleared afterwards.
func bytesOf(s string) []byte {
	if s == "" {
		return nil
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// stringOf returns b as a string without copying it: b belongs to a
// request message that nothing writes to, and a store copies what it keeps
// of a Key (core.Store's contract).
func stringOf(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// wireLimit holds a StoreLimit and its period, to be filled in place.
type wireLimit struct {
	limit  ratelimitv1.StoreLimit
	period durationpb.Duration
}

// set fills w from l and returns its message.
func (w *wireLimit) set(l core.Limit) *ratelimitv1.StoreLimit {
	w.limit.Algorithm = ratelimitv1.StoreAlgorithm(l.Algorithm)
	w.limit.Rate = l.Rate
	w.limit.Burst = l.Burst
	setDuration(&w.period, l.Period)
	w.limit.Period = &w.period
	return &w.limit
}

// newLimit returns l as a new message.
func newLimit(l core.Limit) *ratelimitv1.StoreLimit {
	w := new(wireLimit)
	return w.set(l)
}

// wireKey holds a StoreKey, to be filled in place.
type wireKey struct{ key ratelimitv1.StoreKey }

// set fills w from k (aliasing its strings) and returns its message.
func (w *wireKey) set(k core.Key) *ratelimitv1.StoreKey {
	w.key.Identity = bytesOf(k.Identity)
	w.key.Policy = bytesOf(k.Policy)
	return &w.key
}

// clear drops the strings w aliases.
func (w *wireKey) clear() { w.key.Identity, w.key.Policy = nil, nil }

// own replaces the strings w aliases by copies of them, so that w may
// outlive them.
func (w *wireKey) own() {
	w.key.Identity, w.key.Policy = bytes.Clone(w.key.Identity), bytes.Clone(w.key.Policy)
}

// limitOf reads the limit of op i (or of no op, for a negative i): nil is
// the zero Limit (invalid for a Take, a block for an override). An
// algorithm out of range, or a period that is not a valid Duration, is an
// error wrapping core.ErrInvalidLimit that names the field.
func limitOf(p *ratelimitv1.StoreLimit, i int, field string) (core.Limit, error) {
	if p == nil {
		return core.Limit{}, nil
	}
	a := p.Algorithm
	if a < 0 || a > math.MaxUint8 {
		return core.Limit{}, opError(i, field+".Algorithm", core.ErrInvalidLimit, "unknown algorithm %d", int32(a))
	}
	period, ok := duration(p.Period)
	if !ok {
		return core.Limit{}, opError(i, field+".Period", core.ErrInvalidLimit, "not a valid duration (seconds %d, nanos %d)", p.Period.GetSeconds(), p.Period.GetNanos())
	}
	return core.Limit{Algorithm: core.Algorithm(a), Rate: p.Rate, Period: period, Burst: p.Burst}, nil
}

// wireResult holds a StoreResult and its durations, to be filled in place.
type wireResult struct {
	result            ratelimitv1.StoreResult
	retryAt, resetAft durationpb.Duration
	applied           wireLimit
}

// set fills w from r and returns its message.
func (w *wireResult) set(r *core.Result) *ratelimitv1.StoreResult {
	m := &w.result
	m.Allowed = r.Allowed
	m.State = ratelimitv1.StoreState(r.State)
	m.Previous = ratelimitv1.StoreState(r.Previous)
	m.Source = ratelimitv1.StoreSource(r.Source)
	m.Capacity = r.Capacity
	m.Remaining = r.Remaining
	if r.RetryAfter != 0 {
		setDuration(&w.retryAt, r.RetryAfter)
		m.RetryAfter = &w.retryAt
	}
	if r.ResetAfter != 0 {
		setDuration(&w.resetAft, r.ResetAfter)
		m.ResetAfter = &w.resetAft
	}
	m.At = r.At
	if r.Applied != nil {
		m.Applied = w.applied.set(*r.Applied)
	}
	m.Override = r.Override
	return m
}

// resultOf reads a result into r.
func resultOf(p *ratelimitv1.StoreResult, r *core.Result) {
	retry, _ := duration(p.RetryAfter)
	reset, _ := duration(p.ResetAfter)
	*r = core.Result{
		Allowed:    p.Allowed,
		State:      core.State(p.State),
		Previous:   core.State(p.Previous),
		Source:     core.Source(p.Source),
		Capacity:   p.Capacity,
		Remaining:  p.Remaining,
		RetryAfter: retry,
		ResetAfter: reset,
		At:         p.At,
		Override:   p.Override,
	}
	if p.Applied != nil {
		l, err := limitOf(p.Applied, -1, "Applied")
		if err == nil {
			r.Applied = &l
		}
	}
}
