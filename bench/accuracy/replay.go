package accuracy

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
)

// Decider decides the requests of one replay, called in trace order: it
// reports whether the request of client at instant at (µs since the epoch)
// is admitted. Every request costs 1.
type Decider func(ctx context.Context, client int32, at int64) (bool, error)

// Metrics is what one replay measured. The reference is an exact sliding
// log of Rate per Period: a request at t is within the limit when fewer than
// Rate requests of its client were admitted in (t-Period, t] — the window
// sluice's SlidingWindowLog uses.
type Metrics struct {
	// Requests is the number of requests replayed, Admitted how many the
	// decider admitted.
	Requests, Admitted int64
	// WronglyAllowed counts requests the decider admitted although the
	// exact log, given the requests the decider itself had admitted so far
	// (for the same client), would have denied them; WronglyDenied the
	// converse. Every wrongly allowed request makes some true window hold
	// more than Rate admissions.
	WronglyAllowed, WronglyDenied int64
	// FarAllowed counts the wrongly allowed requests that took their window
	// more than Tolerance over Rate (n+1 > (1+Tolerance)×Rate admissions);
	// FarDenied the wrongly denied ones whose window was less than
	// 1-Tolerance full (n < (1-Tolerance)×Rate). They tell near ties,
	// frequent for any approximation while a client pushes at the limit,
	// from material errors.
	FarAllowed, FarDenied int64
	// MaxWindow is the largest number of requests of one client admitted
	// within a window (t-Period, t], over every t and client.
	MaxWindow int64
	// EstimateSamples and EstimateErrorSum measure the sliding window
	// counter's weighted estimate over the admitted history: before every
	// request whose true window (t-Period, t] holds n > 0 admissions, with
	// p admissions in the previous aligned window, c in the current one
	// and a fraction f of it elapsed, |p×(1-f) + c - n| / n is added to
	// the sum. Meaningful for the sliding window counter, whose decisions
	// use that estimate.
	EstimateSamples  int64
	EstimateErrorSum float64
}

// Tolerance is the margin, in percent of Rate, beyond which FarAllowed and
// FarDenied count an error as material.
const Tolerance = 10

// MaxRatio is MaxWindow divided by rate: 1 for an exact limiter under
// pressure, 2 for a fixed window attacked at a boundary.
func (m Metrics) MaxRatio(rate int64) float64 { return float64(m.MaxWindow) / float64(rate) }

// WronglyAllowedShare is the share of all requests wrongly allowed, in
// [0, 1].
func (m Metrics) WronglyAllowedShare() float64 { return share(m.WronglyAllowed, m.Requests) }

// WronglyDeniedShare is the share of all requests wrongly denied, in [0, 1].
func (m Metrics) WronglyDeniedShare() float64 { return share(m.WronglyDenied, m.Requests) }

// FarAllowedShare is the share of all requests counted by FarAllowed.
func (m Metrics) FarAllowedShare() float64 { return share(m.FarAllowed, m.Requests) }

// FarDeniedShare is the share of all requests counted by FarDenied.
func (m Metrics) FarDeniedShare() float64 { return share(m.FarDenied, m.Requests) }

// WrongShare is the share of all requests decided differently from the exact
// log (Cloudflare's "wrongly allowed or rate limited").
func (m Metrics) WrongShare() float64 { return share(m.WronglyAllowed+m.WronglyDenied, m.Requests) }

// EstimateError is the mean relative difference between the sliding window
// counter's estimate and the true count (see EstimateSamples), or NaN
// without samples.
func (m Metrics) EstimateError() float64 {
	if m.EstimateSamples == 0 {
		return math.NaN()
	}
	return m.EstimateErrorSum / float64(m.EstimateSamples)
}

func share(n, of int64) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}

// history is the admissions of one client: the instants of those still in
// the sliding window (a queue from head) and the counts of the last two
// aligned windows.
type history struct {
	at        []int64
	head      int
	w         int64 // index of the aligned window of cur
	cur, prev int64
}

// expire drops the admissions at or before t-P and returns how many remain.
func (h *history) expire(t, P int64) int64 {
	for h.head < len(h.at) && h.at[h.head] <= t-P {
		h.head++
	}
	if h.head >= 64 && 2*h.head >= len(h.at) {
		h.at = append(h.at[:0], h.at[h.head:]...)
		h.head = 0
	}
	return int64(len(h.at) - h.head)
}

// counts returns the admissions of the previous and current aligned windows
// as seen from window w.
func (h *history) counts(w int64) (prev, cur int64) {
	switch w - h.w {
	case 0:
		return h.prev, h.cur
	case 1:
		return h.cur, 0
	}
	return 0, 0
}

// admit records an admission at t, in aligned window w.
func (h *history) admit(t, w int64) {
	h.prev, h.cur = h.counts(w)
	h.w = w
	h.cur++
	h.at = append(h.at, t)
}

// counterEstimate is the sliding window counter's estimate of the rate at
// elapsed µs into an aligned window of P µs: prev×(P-elapsed)/P + cur.
func counterEstimate(prev, cur, elapsed, P int64) float64 {
	return float64(prev)*float64(P-elapsed)/float64(P) + float64(cur)
}

// Replay feeds every request of tr, in order, to d and measures its
// decisions against the exact sliding log of l.Rate per l.Period (l's
// algorithm and burst are ignored).
func Replay(ctx context.Context, tr *Trace, l core.Limit, d Decider) (Metrics, error) {
	P := int64(l.Period / time.Microsecond)
	if l.Rate < 1 || P < 1 {
		return Metrics{}, fmt.Errorf("accuracy: Replay: invalid limit %s", l)
	}
	hs := make([]history, tr.Clients)
	var m Metrics
	last := int64(math.MinInt64)
	for i, r := range tr.Requests {
		if i&0xffff == 0 {
			if err := ctx.Err(); err != nil {
				return m, fmt.Errorf("accuracy: Replay %s: %w", tr.Name, err)
			}
		}
		if r.At < last || r.Client < 0 || int(r.Client) >= tr.Clients {
			return m, fmt.Errorf("accuracy: Replay %s: request %d (client %d at %d) out of order or range", tr.Name, i, r.Client, r.At)
		}
		last = r.At
		h := &hs[r.Client]
		n := h.expire(r.At, P)
		within := n < l.Rate // the exact log would admit a cost of 1
		w := r.At / P
		if n > 0 {
			prev, cur := h.counts(w)
			est := counterEstimate(prev, cur, r.At-w*P, P)
			m.EstimateErrorSum += math.Abs(est-float64(n)) / float64(n)
			m.EstimateSamples++
		}
		ok, err := d(ctx, r.Client, r.At)
		if err != nil {
			return m, fmt.Errorf("accuracy: Replay %s: request %d: %w", tr.Name, i, err)
		}
		m.Requests++
		switch {
		case ok:
			m.Admitted++
			h.admit(r.At, w)
			m.MaxWindow = max(m.MaxWindow, n+1)
			if !within {
				m.WronglyAllowed++
				if 100*(n+1) > (100+Tolerance)*l.Rate {
					m.FarAllowed++
				}
			}
		case within:
			m.WronglyDenied++
			if 100*n < (100-Tolerance)*l.Rate {
				m.FarDenied++
			}
		}
	}
	return m, nil
}

// NewExact returns the reference: an exact sliding log of l.Rate per
// l.Period for clients clients, written independently of sluice's
// SlidingWindowLog. It admits a request at t when fewer than Rate requests
// of its client were admitted in (t-Period, t].
func NewExact(l core.Limit, clients int) Decider {
	P := int64(l.Period / time.Microsecond)
	logs := make([][]int64, clients)
	return func(_ context.Context, c int32, at int64) (bool, error) {
		lg := logs[c]
		drop := 0
		for drop < len(lg) && lg[drop] <= at-P {
			drop++
		}
		lg = lg[drop:]
		ok := int64(len(lg)) < l.Rate
		if ok {
			lg = append(lg, at)
		}
		logs[c] = lg
		return ok, nil
	}
}

// NewSluice returns a Decider backed by a fresh memorystore.Store on a
// simulated clock (the instant of the request being decided), taking cost 1
// from key "client:<n>" under l with its Algorithm (Burst as given: zero
// means Rate for the buckets). Close the store when done.
func NewSluice(l core.Limit, clients int) (Decider, *memorystore.Store, error) {
	if err := l.Validate(); err != nil {
		return nil, nil, fmt.Errorf("accuracy: %w", err)
	}
	var now int64
	st, err := memorystore.New(
		memorystore.WithClock(func() time.Time { return time.UnixMicro(now) }),
		memorystore.WithSweepInterval(0),
		memorystore.WithMaxKeys(max(4*clients, 1<<16)),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("accuracy: %w", err)
	}
	keys := make([]string, clients)
	for i := range keys {
		keys[i] = "client:" + strconv.Itoa(i)
	}
	d := func(ctx context.Context, c int32, at int64) (bool, error) {
		now = at
		ops := [1]core.Op{{Key: core.Key{Identity: keys[c]}, Limit: l, Cost: 1}}
		var out [1]core.Result
		if err := st.Take(ctx, ops[:], out[:]); err != nil {
			return false, fmt.Errorf("accuracy: %s: %w", l.Algorithm, err)
		}
		return out[0].Allowed, nil
	}
	return d, st, nil
}

// CountAll measures the sliding window counter's estimate the way
// Cloudflare's study counted: every request counts, admitted or not, and the
// question at each request is whether its client is over the threshold.
// Unlike Metrics, it depends on the trace alone, not on any limiter's
// decisions.
type CountAll struct {
	// Requests is the number of requests of the trace.
	Requests int64
	// Disagreements counts the requests at which the estimate and the exact
	// count disagree on whether the client is over the limit: with n
	// requests of the client in (t-Period, t) and the counter's estimate e
	// over the same requests, n+1 <= Rate but e+1 > Rate, or the converse.
	Disagreements int64
	// Samples and ErrorSum: |e - n| / n summed over the requests with n > 0.
	Samples  int64
	ErrorSum float64
}

// DisagreementShare is the share of requests at which the estimate and the
// exact count disagree.
func (c CountAll) DisagreementShare() float64 { return share(c.Disagreements, c.Requests) }

// EstimateError is the mean relative difference between the estimate and
// the exact count, or NaN without samples.
func (c CountAll) EstimateError() float64 {
	if c.Samples == 0 {
		return math.NaN()
	}
	return c.ErrorSum / float64(c.Samples)
}

// MeasureCountAll computes the CountAll figures of tr under l.Rate per
// l.Period.
func MeasureCountAll(ctx context.Context, tr *Trace, l core.Limit) (CountAll, error) {
	P := int64(l.Period / time.Microsecond)
	if l.Rate < 1 || P < 1 {
		return CountAll{}, fmt.Errorf("accuracy: MeasureCountAll: invalid limit %s", l)
	}
	hs := make([]history, tr.Clients)
	rate := float64(l.Rate)
	var m CountAll
	for i, r := range tr.Requests {
		if i&0xffff == 0 {
			if err := ctx.Err(); err != nil {
				return m, fmt.Errorf("accuracy: MeasureCountAll %s: %w", tr.Name, err)
			}
		}
		h := &hs[r.Client]
		n := h.expire(r.At, P)
		w := r.At / P
		prev, cur := h.counts(w)
		est := counterEstimate(prev, cur, r.At-w*P, P)
		if (float64(n)+1 <= rate) != (est+1 <= rate) {
			m.Disagreements++
		}
		if n > 0 {
			m.ErrorSum += math.Abs(est-float64(n)) / float64(n)
			m.Samples++
		}
		h.admit(r.At, w)
		m.Requests++
	}
	return m, nil
}
