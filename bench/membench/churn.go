package membench

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
)

// The churn scenario: decisions on existing hot keys are
// timed one by one while another goroutine inserts new keys that expire
// after ChurnLifetime, millions of them over a run, into sluice's memory
// store with its defaults (1M keys, a sweep every second), with the
// sweeper on or off.
const (
	// ChurnHotKeys is the number of hot keys the timed decisions walk.
	ChurnHotKeys = 1024
	// ChurnLifetime is how long a churned key lives: one request under a
	// limit of 1 per ChurnLifetime.
	ChurnLifetime = 20 * time.Millisecond
)

// ChurnResult is one churn run.
type ChurnResult struct {
	Sweeper   bool
	Duration  time.Duration
	Decisions int64 // timed hot-key decisions
	ChurnKeys int64 // new keys inserted
	Evictions int64
	// Quantiles and maximum of the hot-key decisions' latency.
	P50, P99, P999, Max time.Duration
	// InsertMax is the longest insert of a new key.
	InsertMax time.Duration
}

// Churn runs the churn scenario for d (plus a short warm-up) and returns
// its figures.
func Churn(d time.Duration, sweeper bool) (ChurnResult, error) {
	opts := []memorystore.Option{}
	if !sweeper {
		opts = append(opts, memorystore.WithSweepInterval(0))
	}
	s, err := memorystore.New(opts...)
	if err != nil {
		return ChurnResult{}, err
	}
	defer s.Close()
	ctx := context.Background()
	// Admitted, and alive all along: the existing-key path.
	hotL := core.PerHour(1_000_000)
	hot := make([]string, ChurnHotKeys)
	for i := range hot {
		hot[i] = "hot:" + strconv.Itoa(i)
		if _, err := takeOne(ctx, s, hot[i], hotL, 1); err != nil {
			return ChurnResult{}, err
		}
	}
	var stop atomic.Bool
	churned := make(chan churnInserts, 1)
	go func() { churned <- insertChurn(ctx, s, &stop) }()
	time.Sleep(min(d/10, time.Second)) // the churn fills the store first
	h, elapsed, herr := timeHot(ctx, s, hot, hotL, d)
	stop.Store(true)
	c := <-churned
	if herr != nil || c.err != nil {
		return ChurnResult{}, fmt.Errorf("churn: %w", errors.Join(herr, c.err))
	}
	return ChurnResult{
		Sweeper: sweeper, Duration: elapsed, Decisions: h.N(), ChurnKeys: c.n, Evictions: s.Evictions(),
		P50: h.Quantile(0.5), P99: h.Quantile(0.99), P999: h.Quantile(0.999), Max: h.Max(),
		InsertMax: c.worst,
	}, nil
}

// churnInserts is what insertChurn did: n keys inserted, the longest
// insert, and the error that stopped it.
type churnInserts struct {
	n     int64
	worst time.Duration
	err   error
}

// insertChurn inserts new keys that live ChurnLifetime into s until stop.
func insertChurn(ctx context.Context, s *memorystore.Store, stop *atomic.Bool) churnInserts {
	churnL := core.Per(1, ChurnLifetime)
	var c churnInserts
	buf := make([]byte, 0, 32)
	for !stop.Load() {
		buf = strconv.AppendInt(append(buf[:0], "churn:"...), c.n, 10)
		t0 := time.Now()
		// The store hashes the key and keeps nothing of it: no garbage.
		if _, err := takeOne(ctx, s, unsafe.String(&buf[0], len(buf)), churnL, 1); err != nil {
			c.err = err
			break
		}
		c.worst = max(c.worst, time.Since(t0))
		c.n++
	}
	return c
}

// timeHot times decisions on the hot keys, each admitted, one by one for
// d, and returns their histogram and the time they took.
func timeHot(ctx context.Context, s *memorystore.Store, hot []string, hotL core.Limit, d time.Duration) (Histogram, time.Duration, error) {
	var h Histogram
	start := time.Now()
	for i := 0; ; i++ {
		t0 := time.Now()
		allowed, err := takeOne(ctx, s, hot[i%ChurnHotKeys], hotL, 1)
		t1 := time.Now()
		if err == nil && !allowed {
			err = fmt.Errorf("hot key %s denied", hot[i%ChurnHotKeys])
		}
		if err != nil {
			return h, time.Since(start), err
		}
		h.Add(t1.Sub(t0))
		if i%1024 == 0 && t1.Sub(start) >= d {
			return h, time.Since(start), nil
		}
	}
}

// Histogram is a log-linear histogram of durations (16 buckets per power of
// two of ns): a quantile is within 1/16 of the truth. The zero value is
// empty; it is not safe for concurrent use.
type Histogram struct {
	counts [64 * 16]int64
	n      int64
	max    time.Duration
}

// Add records d.
func (h *Histogram) Add(d time.Duration) {
	ns := max(int64(d), 1)
	h.n++
	h.max = max(h.max, time.Duration(ns))
	e := 63 - bits.LeadingZeros64(uint64(ns))
	var sub int64
	if e >= 4 {
		sub = ns >> (e - 4) & 15
	} else {
		sub = ns << (4 - e) & 15
	}
	h.counts[e*16+int(sub)]++
}

// N returns the number of durations recorded.
func (h *Histogram) N() int64 { return h.n }

// Max returns the longest duration recorded.
func (h *Histogram) Max() time.Duration { return h.max }

// Quantile returns the upper bound of the bucket holding quantile q (at
// most Max).
func (h *Histogram) Quantile(q float64) time.Duration {
	want := int64(q * float64(h.n))
	seen := int64(0)
	for i, c := range h.counts {
		if seen += c; seen > want {
			e, sub := i/16, int64(i%16)
			hi := int64(1)<<e + (sub+1)<<e/16
			if e < 4 {
				hi = int64(1)<<e + (sub+1)>>(4-e)
			}
			return min(time.Duration(hi), h.max)
		}
	}
	return h.max
}
