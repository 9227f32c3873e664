package leasebench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/bench/redisbench"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/lease"
	"github.com/sluicehq/sluice/core/redisstore"
)

// GlobalConfig sizes the fleet-wide limit scenario: Instances lease
// layers (each its own Redis client and store, as processes have) of
// Goroutines goroutines each decide one identity for everyone, limited to
// Rate per second (a fixed window), for Duration.
type GlobalConfig struct {
	Instances, Goroutines int
	Rate                  int64
	Duration              time.Duration
	Hold                  time.Duration
}

// DefaultGlobal is the seed's L1 rule: 500 000 per second, 8 instances.
var DefaultGlobal = GlobalConfig{Instances: 8, Goroutines: 2, Rate: 500_000, Duration: 3 * time.Second, Hold: 100 * time.Millisecond}

// GlobalResult is one run of the fleet-wide limit.
type GlobalResult struct {
	Config              GlobalConfig
	Decisions, Admitted int64
	Elapsed             time.Duration
	// PerWindow is what the fleet admitted in each whole one-second window
	// of the run (the first and last, partly run, left out).
	PerWindow  []int64
	RedisCalls int64
}

// Offered is the decisions per second the fleet made.
func (r GlobalResult) Offered() float64 { return float64(r.Decisions) / r.Elapsed.Seconds() }

// Reached reports whether the fleet offered more than the limit.
func (r GlobalResult) Reached() bool { return r.Offered() > float64(r.Config.Rate) }

// WorstDeviation is the largest |admitted − Rate| / Rate over the whole
// windows (meaningful when Reached).
func (r GlobalResult) WorstDeviation() float64 {
	worst := 0.0
	for _, n := range r.PerWindow {
		d := float64(n-r.Config.Rate) / float64(r.Config.Rate)
		worst = max(worst, d, -d)
	}
	return worst
}

// RedisShare is the share of the decisions that were Redis calls.
func (r GlobalResult) RedisShare() float64 { return float64(r.RedisCalls) / float64(r.Decisions) }

// RunGlobal runs the fleet-wide limit on srv.
func RunGlobal(ctx context.Context, srv *redisbench.Server, cfg GlobalConfig) (GlobalResult, error) {
	admin := srv.Admin() // the server's own: not closed here
	if err := admin.FlushAll(ctx).Err(); err != nil {
		return GlobalResult{}, fmt.Errorf("FLUSHALL: %w", err)
	}
	stores, closeAll, err := globalFleet(srv, cfg)
	if err != nil {
		return GlobalResult{}, err
	}
	defer closeAll()
	calls0, _, err := serverCounters(ctx, admin)
	if err != nil {
		return GlobalResult{}, err
	}
	res, windows, err := runFleet(ctx, stores, cfg)
	if err != nil {
		return res, err
	}
	calls1, _, err := serverCounters(ctx, admin)
	if err != nil {
		return res, err
	}
	res.RedisCalls = calls1 - calls0
	ws := make([]int64, 0, len(windows))
	for w := range windows {
		ws = append(ws, w)
	}
	slices.Sort(ws)
	for i := 1; i+1 < len(ws); i++ {
		res.PerWindow = append(res.PerWindow, windows[ws[i]])
	}
	return res, nil
}

// globalFleet builds cfg's lease layers, each over its own client and
// Redis store, and what closes them.
func globalFleet(srv *redisbench.Server, cfg GlobalConfig) ([]*lease.Store, func(), error) {
	var closers []func()
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	stores := make([]*lease.Store, cfg.Instances)
	for i := range stores {
		client := redisbench.NewClient(srv.Addr, cfg.Goroutines)
		closers = append(closers, func() { _ = client.Close() })
		rs, err := redisstore.New(client, redisstore.WithTimeout(5*time.Second))
		if err == nil {
			stores[i], err = lease.New(rs)
		}
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		s := stores[i]
		closers = append(closers, func() { _ = s.Close() })
	}
	return stores, closeAll, nil
}

// runFleet decides the global identity from every store's goroutines for
// cfg.Duration, and returns the decisions and the admissions per second.
func runFleet(ctx context.Context, stores []*lease.Store, cfg GlobalConfig) (GlobalResult, map[int64]int64, error) {
	l := hotLimit(cfg.Rate, time.Second)
	res := GlobalResult{Config: cfg}
	windows := map[int64]int64{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, len(stores)*cfg.Goroutines)
	start := time.Now()
	for _, s := range stores {
		for range cfg.Goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n, per, err := decideGlobal(ctx, s, l, cfg.Hold, start, start.Add(cfg.Duration))
				mu.Lock()
				res.Decisions += n
				for i, a := range per {
					if a > 0 {
						windows[start.Unix()-1+int64(i)] += a
						res.Admitted += a
					}
				}
				mu.Unlock()
				errs <- err
			}()
		}
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	close(errs)
	for err := range errs {
		if err != nil {
			return res, nil, err
		}
	}
	return res, windows, nil
}

// decideGlobal decides the global identity from start until stop, and
// returns its decisions and its admissions per one-second window (by
// Result.At), the first being the second before start's.
func decideGlobal(ctx context.Context, s *lease.Store, l core.Limit, hold time.Duration, start, stop time.Time) (int64, []int64, error) {
	ops := [1]core.Op{{Key: core.Key{Identity: "all", Policy: "global"}, Limit: l, Cost: 1, Lease: hold}}
	var out [1]core.Result
	base := start.Unix() - 1
	per := make([]int64, int(stop.Sub(start)/time.Second)+4)
	n := int64(0)
	for ; n&63 != 0 || time.Now().Before(stop); n++ {
		if err := s.Take(ctx, ops[:], out[:]); err != nil {
			return n, per, err
		}
		if out[0].Allowed {
			if i := out[0].At/1_000_000 - base; i >= 0 && i < int64(len(per)) {
				per[i]++
			}
		}
	}
	return n, per, nil
}
