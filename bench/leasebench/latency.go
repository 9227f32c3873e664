package leasebench

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/bench/redisbench"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/lease"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
)

// LatencyResult is the mean latency of one hot key's decisions, from one
// goroutine: on the memory store, and leased over the Redis store.
type LatencyResult struct {
	Memory, Leased time.Duration
	// LeasedCalls are the Redis calls the leased decisions made.
	LeasedCalls, Decisions int64
}

// Ratio is the leased latency over the memory store's.
func (r LatencyResult) Ratio() float64 { return float64(r.Leased) / float64(r.Memory) }

// RunLatency times n decisions of one hot key from one goroutine on each,
// after a warm-up (the leased key's blocks grown).
func RunLatency(ctx context.Context, srv *redisbench.Server, n int) (LatencyResult, error) {
	mem, err := memorystore.New()
	if err != nil {
		return LatencyResult{}, err
	}
	defer mem.Close()
	client := redisbench.NewClient(srv.Addr, 4)
	defer client.Close()
	rs, err := redisstore.New(client, redisstore.WithTimeout(5*time.Second))
	if err != nil {
		return LatencyResult{}, err
	}
	ls, err := lease.New(rs)
	if err != nil {
		return LatencyResult{}, err
	}
	defer ls.Close()
	l := hotLimit(hotRate, time.Second)
	key := core.Key{Identity: "latency"}
	var r LatencyResult
	if r.Memory, err = timeDecisions(ctx, mem, key, l, 0, n); err != nil {
		return r, err
	}
	if _, err = timeDecisions(ctx, ls, key, l, 100*time.Millisecond, n/4); err != nil { // warm-up
		return r, err
	}
	before := ls.Stats()
	if r.Leased, err = timeDecisions(ctx, ls, key, l, 100*time.Millisecond, n); err != nil {
		return r, err
	}
	after := ls.Stats()
	r.LeasedCalls = int64(after.Takes + after.PassedThrough + after.GivenBack - before.Takes - before.PassedThrough - before.GivenBack)
	r.Decisions = int64(n)
	return r, nil
}

// timeDecisions returns the mean time of n decisions of key on s.
func timeDecisions(ctx context.Context, s core.Store, key core.Key, l core.Limit, hold time.Duration, n int) (time.Duration, error) {
	ops := [1]core.Op{{Key: key, Limit: l, Cost: 1, Lease: hold}}
	var out [1]core.Result
	start := time.Now()
	for range n {
		if err := s.Take(ctx, ops[:], out[:]); err != nil {
			return 0, err
		}
		if !out[0].Allowed {
			return 0, fmt.Errorf("denied under a limit never reached: %+v", out[0])
		}
	}
	return time.Since(start) / time.Duration(n), nil
}
