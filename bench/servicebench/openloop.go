package servicebench

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/bench/redisbench"
)

// OpenRate is the default offered rate of the open-loop runs, calls per
// second: low enough for every server measured here to keep up on two
// shared CPUs with room to spare, so that latency is the servers' own and
// not a queue of a saturated machine.
const OpenRate = 3000

// OpenConfig is an open-loop load: calls offered at Rate per second on a
// fixed schedule (call i is due at start + i/Rate) whatever the answers
// take, by at most Callers calls in flight.
type OpenConfig struct {
	Callers  int
	Keys     []string
	Rate     float64
	Duration time.Duration
}

// OpenResult is what an open-loop load measured.
type OpenResult struct {
	Calls    int64
	Elapsed  time.Duration // from the start until the last call finished
	Denied   int64
	Errors   int64
	FirstErr error
	// Latency of every call from the time it was due to its answer: the
	// wait for a free caller (all Callers in flight) and the load
	// generator's lateness are in it, as a caller with a deadline sees it.
	Latency redisbench.Histogram
	// Sent is the latency from the moment the call was sent.
	Sent redisbench.Histogram
	// Lag is how late each call was sent after it was due.
	Lag redisbench.Histogram
	// MaxInFlight is the most calls in flight at once: Callers means the
	// load generator ran out of callers and calls waited for one.
	MaxInFlight int64
}

// openCaller is one caller's share of an open-loop result.
type openCaller struct {
	lat, sent, lag        redisbench.Histogram
	calls, denied, errors int64
	err                   error
}

// LoadOpen runs cfg against d: Callers goroutines take the next due call
// in turn, wait until it is due and make it.
func LoadOpen(ctx context.Context, d redisbench.Decider, cfg OpenConfig) *OpenResult {
	interval := time.Duration(float64(time.Second) / cfg.Rate)
	n := max(int64(cfg.Duration/interval), 1)
	callers := make([]*openCaller, max(cfg.Callers, 1))
	var next, inFlight, maxInFlight atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for g := range callers {
		c := new(openCaller)
		callers[g] = c
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= n {
					return
				}
				due := start.Add(time.Duration(i) * interval)
				if wait := time.Until(due); wait > 0 {
					time.Sleep(wait)
				}
				peak(&maxInFlight, inFlight.Add(1))
				t0 := time.Now()
				ok, err := d.Decide(ctx, cfg.Keys[int(i%int64(len(cfg.Keys)))])
				t1 := time.Now()
				inFlight.Add(-1)
				c.lat.Record(t1.Sub(due))
				c.sent.Record(t1.Sub(t0))
				c.lag.Record(t0.Sub(due))
				c.calls++
				switch {
				case err != nil:
					if c.errors++; c.err == nil {
						c.err = err
					}
				case !ok:
					c.denied++
				}
			}
		})
	}
	wg.Wait()
	r := &OpenResult{Elapsed: time.Since(start), MaxInFlight: maxInFlight.Load()}
	for _, c := range callers {
		r.Calls += c.calls
		r.Denied += c.denied
		r.Errors += c.errors
		if r.FirstErr == nil {
			r.FirstErr = c.err
		}
		r.Latency.Merge(&c.lat)
		r.Sent.Merge(&c.sent)
		r.Lag.Merge(&c.lag)
	}
	return r
}

// peak raises m to v if v is larger.
func peak(m *atomic.Int64, v int64) {
	for {
		cur := m.Load()
		if v <= cur || m.CompareAndSwap(cur, v) {
			return
		}
	}
}
