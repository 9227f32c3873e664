package leasebench

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/bench/redisbench"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/lease"
	"github.com/sluicehq/sluice/core/redisstore"
)

// OutageResult is what a guarded, leased instance decided once its Redis
// was killed.
type OutageResult struct {
	// Held is the decisions admitted from blocks after the kill (exactly:
	// units Redis had counted), over HeldFor, from the kill to the last of
	// them; FailedClosed the decisions the guard's failure mode answered
	// after that.
	Held         int64
	HeldFor      time.Duration
	FailedClosed int64
}

// RunOutage starts a redis-server of its own, has an instance (lease
// layer over a fail-closed guard over the Redis store) decide a key at
// full speed from goroutines, kills the server after warm, and counts
// what went on. The key's limit is a fixed window of a second, never
// reached, its Lease hold.
func RunOutage(ctx context.Context, bin string, goroutines int, warm, hold time.Duration) (OutageResult, error) {
	srv, err := redisbench.StartServer(bin)
	if err != nil {
		return OutageResult{}, err
	}
	defer srv.Close()
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, PoolSize: goroutines + 4})
	defer client.Close()
	rs, err := redisstore.New(client, redisstore.WithTimeout(time.Second))
	if err != nil {
		return OutageResult{}, err
	}
	g, err := guard.New(rs, guard.WithFailClosed(time.Second), guard.WithTimeout(50*time.Millisecond),
		guard.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		return OutageResult{}, err
	}
	defer g.Close()
	ls, err := lease.New(g, lease.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		return OutageResult{}, err
	}
	defer ls.Close()
	var killed atomic.Int64 // UnixNano of the kill, 0 before
	var held, closed, last atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outageLoad(ctx, ls, hold, stop, &killed, &held, &closed, &last)
		}()
	}
	time.Sleep(warm)
	killed.Store(time.Now().UnixNano())
	_ = srv.Close()
	for deadline := time.Now().Add(10 * time.Second); closed.Load() < 1000 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	r := OutageResult{Held: held.Load(), FailedClosed: closed.Load()}
	if l := last.Load(); l > 0 {
		r.HeldFor = time.Duration(l - killed.Load())
	}
	return r, nil
}

func outageLoad(ctx context.Context, s core.Store, hold time.Duration, stop <-chan struct{}, killed, held, closed, last *atomic.Int64) {
	ops := [1]core.Op{{Key: core.Key{Identity: "outage"}, Limit: hotLimit(hotRate, time.Second), Cost: 1, Lease: hold}}
	var out [1]core.Result
	for {
		select {
		case <-stop:
			return
		default:
		}
		if err := s.Take(ctx, ops[:], out[:]); err != nil {
			return
		}
		k := killed.Load()
		switch {
		case k == 0:
		case out[0].Allowed && out[0].Source == core.FromStore:
			held.Add(1)
			last.Store(time.Now().UnixNano())
		case out[0].Source == core.FailedClosed:
			closed.Add(1)
		}
	}
}
