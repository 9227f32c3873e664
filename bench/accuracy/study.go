package accuracy

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core"
)

// Exact is the name of the reference row (the exact sliding log of NewExact).
const Exact = "exact"

// Algorithms are the rows of every trace, in report order: the reference,
// then sluice's six algorithms, windows first.
var Algorithms = []string{
	Exact,
	core.SlidingWindowLog.String(),
	core.SlidingWindowCounter.String(),
	core.FixedWindow.String(),
	core.TokenBucket.String(),
	core.LeakyBucket.String(),
	core.GCRA.String(),
}

// Option configures Run.
type Option func(*config)

type config struct {
	rate     int64
	period   time.Duration
	scale    Scale
	seed     uint64
	parallel int
}

// WithLimit sets the limit every algorithm is configured with: rate events
// per period (default 100 per minute), Burst left at zero (= rate) for the
// buckets.
func WithLimit(rate int64, period time.Duration) Option {
	return func(c *config) { c.rate, c.period = rate, period }
}

// WithScale sets the size of the traces (default Quick).
func WithScale(s Scale) Option { return func(c *config) { c.scale = s } }

// WithSeed sets the seed of the traces (default 1).
func WithSeed(seed uint64) Option { return func(c *config) { c.seed = seed } }

// WithParallel sets how many replays run at once (default GOMAXPROCS). The
// results do not depend on it.
func WithParallel(n int) Option { return func(c *config) { c.parallel = n } }

// TraceSummary describes one trace of a Report.
type TraceSummary struct {
	Name, Title string
	Clients     int
	Requests    int
	// Periods is the trace's length in Periods of the limit.
	Periods int64
	// CountAll is the sliding window counter's estimate measured the way
	// Cloudflare's study counted (every request counts).
	CountAll CountAll
}

// Row is one replay: a trace against one algorithm (or the reference).
type Row struct {
	Trace string
	// Algorithm is a core.Algorithm's name, or Exact.
	Algorithm string
	Metrics
}

// Report is the outcome of Run.
type Report struct {
	// Limit is the limit every algorithm was configured with (its
	// Algorithm field is unset).
	Limit core.Limit
	Scale Scale
	Seed  uint64
	// Traces and Rows are in report order: for each trace, one row per
	// entry of Algorithms.
	Traces []TraceSummary
	Rows   []Row
}

// Row returns the row of trace and algorithm.
func (r *Report) Row(trace, algorithm string) (Row, bool) {
	for _, row := range r.Rows {
		if row.Trace == trace && row.Algorithm == algorithm {
			return row, true
		}
	}
	return Row{}, false
}

// Run generates the traces and replays each against the reference and the
// six algorithms, each replay on its own fresh store.
func Run(ctx context.Context, opts ...Option) (*Report, error) {
	c := config{rate: 100, period: time.Minute, scale: Quick, seed: 1, parallel: runtime.GOMAXPROCS(0)}
	for _, o := range opts {
		o(&c)
	}
	l := core.Limit{Rate: c.rate, Period: c.period}
	if err := c.validate(l); err != nil {
		return nil, err
	}
	traces, err := Traces(l, c.scale, c.seed)
	if err != nil {
		return nil, err
	}
	rep := &Report{Limit: l, Scale: c.scale, Seed: c.seed}
	P := int64(l.Period / time.Microsecond)
	for i := range traces {
		tr := &traces[i]
		rep.Traces = append(rep.Traces, TraceSummary{Name: tr.Name, Title: tr.Title, Clients: tr.Clients, Requests: len(tr.Requests), Periods: (tr.End - tr.Start) / P})
		for _, a := range Algorithms {
			rep.Rows = append(rep.Rows, Row{Trace: tr.Name, Algorithm: a})
		}
	}
	if err := rep.measure(ctx, traces, c.parallel); err != nil {
		return nil, err
	}
	return rep, nil
}

// validate checks that l is a valid limit of every algorithm and that the
// parallelism is at least 1.
func (c *config) validate(l core.Limit) error {
	for _, a := range Algorithms[1:] {
		alg, err := core.ParseAlgorithm(a)
		if err != nil {
			return fmt.Errorf("accuracy: %w", err)
		}
		if err := l.WithAlgorithm(alg).Validate(); err != nil {
			return fmt.Errorf("accuracy: %w", err)
		}
	}
	if c.parallel < 1 {
		return fmt.Errorf("accuracy: WithParallel: must be at least 1, got %d", c.parallel)
	}
	return nil
}

// measure fills rep's rows and traces' CountAll: one replay per row, then
// one CountAll per trace, on up to parallel goroutines; the first error
// stops the rest.
func (rep *Report) measure(ctx context.Context, traces []Trace, parallel int) error {
	l := rep.Limit
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	n := len(rep.Rows) + len(traces)
	jobs := make(chan int)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for range min(parallel, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				if j < len(rep.Rows) {
					row := &rep.Rows[j]
					row.Metrics, errs[j] = replayOne(ctx, &traces[j/len(Algorithms)], l, row.Algorithm)
				} else {
					t := j - len(rep.Rows)
					rep.Traces[t].CountAll, errs[j] = MeasureCountAll(ctx, &traces[t], l)
				}
				if errs[j] != nil {
					cancel()
				}
			}
		}()
	}
	for j := range n {
		if ctx.Err() != nil {
			break
		}
		jobs <- j
	}
	close(jobs)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("accuracy: %w", err)
	}
	return nil
}

// replayOne replays tr against the named algorithm on a fresh store (or the
// exact reference).
func replayOne(ctx context.Context, tr *Trace, l core.Limit, name string) (Metrics, error) {
	if name == Exact {
		return Replay(ctx, tr, l, NewExact(l, tr.Clients))
	}
	a, err := core.ParseAlgorithm(name)
	if err != nil {
		return Metrics{}, fmt.Errorf("accuracy: %w", err)
	}
	d, st, err := NewSluice(l.WithAlgorithm(a), tr.Clients)
	if err != nil {
		return Metrics{}, err
	}
	defer st.Close()
	m, err := Replay(ctx, tr, l, d)
	if err != nil {
		return m, err
	}
	// An evicted key would restart fresh and distort the figures.
	if n := st.Evictions(); n > 0 {
		return m, fmt.Errorf("accuracy: %s on %s: the store evicted %d keys", name, tr.Name, n)
	}
	return m, nil
}
