package redisbench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// MemoryIdentities is the default number of identities the memory scenario
// inserts.
const MemoryIdentities = 100_000

// MemorySample is what one run of the memory scenario measured.
type MemorySample struct {
	// Identities is the number of distinct keys decided once each.
	Identities int
	// Keys is the number of Redis keys afterwards (DBSIZE).
	Keys int64
	// Before and After are redis-server's used_memory (INFO memory) before
	// and after the insertions.
	Before, After int64
	// Elapsed is the time the insertions took.
	Elapsed time.Duration
}

// BytesPerIdentity is the growth of the server's memory per identity.
func (s MemorySample) BytesPerIdentity() float64 {
	if s.Identities == 0 {
		return 0
	}
	return float64(s.After-s.Before) / float64(s.Identities)
}

// KeysPerIdentity is the number of Redis keys per identity.
func (s MemorySample) KeysPerIdentity() float64 {
	if s.Identities == 0 {
		return 0
	}
	return float64(s.Keys) / float64(s.Identities)
}

// RunMemory measures the memory redis-server spends per identity for impl
// (not a Ceiling), configured to MemoryQuota: after a warm-up on other keys
// (which opens the client's connections and loads the scripts) the database
// is emptied and the server's used_memory read; then callers goroutines take
// one decision for each of keys, each its own share, and used_memory is read
// again once the server has had a moment to finish rehashing. The growth
// divided by len(keys) is the cost of one identity in Redis: its keys, their
// values and expiry entries, the main and expires dictionaries. A decision
// that fails or is denied is an error.
func RunMemory(ctx context.Context, admin *redis.Client, addr string, impl Impl, callers int, keys []string) (MemorySample, error) {
	if impl.Kind == Ceiling {
		return MemorySample{}, fmt.Errorf("%s: no memory scenario for a ceiling", impl.Name)
	}
	if err := admin.FlushAll(ctx).Err(); err != nil {
		return MemorySample{}, fmt.Errorf("FLUSHALL: %w", err)
	}
	client := NewClient(addr, callers)
	defer client.Close()
	d, err := impl.New(client, MemoryQuota)
	if err != nil {
		return MemorySample{}, fmt.Errorf("%s: new: %w", impl.Name, err)
	}
	warm := make([]string, callers)
	for i := range warm {
		warm[i] = "warm:" + strconv.Itoa(i)
	}
	if err := decideAll(ctx, d, callers, warm); err != nil {
		return MemorySample{}, fmt.Errorf("%s: warm-up: %w", impl.Name, err)
	}
	if err := admin.FlushAll(ctx).Err(); err != nil {
		return MemorySample{}, fmt.Errorf("FLUSHALL: %w", err)
	}
	before, err := usedMemory(ctx, admin)
	if err != nil {
		return MemorySample{}, err
	}
	start := time.Now()
	if err := decideAll(ctx, d, callers, keys); err != nil {
		return MemorySample{}, fmt.Errorf("%s: %w", impl.Name, err)
	}
	elapsed := time.Since(start)
	time.Sleep(300 * time.Millisecond) // the server's cron finishes an incremental rehash
	after, err := usedMemory(ctx, admin)
	if err != nil {
		return MemorySample{}, err
	}
	n, err := admin.DBSize(ctx).Result()
	if err != nil {
		return MemorySample{}, fmt.Errorf("DBSIZE: %w", err)
	}
	s := MemorySample{Identities: len(keys), Keys: n, Before: before, After: after, Elapsed: elapsed}
	if n < int64(len(keys)) {
		return s, fmt.Errorf("%s: %d Redis keys for %d identities: some expired or were never written", impl.Name, n, len(keys))
	}
	return s, nil
}

// decideAll has callers goroutines take one decision for each key, each
// goroutine its own contiguous share; every decision must be admitted.
func decideAll(ctx context.Context, d Decider, callers int, keys []string) error {
	var wg sync.WaitGroup
	var failed atomic.Int64
	var firstMu sync.Mutex
	var first error
	for g := range callers {
		lo, hi := g*len(keys)/callers, (g+1)*len(keys)/callers
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, k := range keys[lo:hi] {
				ok, err := d.Decide(ctx, k)
				if err == nil && !ok {
					err = fmt.Errorf("first decision for %q denied", k)
				}
				if err != nil {
					failed.Add(1)
					firstMu.Lock()
					if first == nil {
						first = err
					}
					firstMu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		return fmt.Errorf("%d of %d decisions failed, first: %w", n, len(keys), first)
	}
	return nil
}

// usedMemory returns redis-server's used_memory (INFO memory).
func usedMemory(ctx context.Context, admin *redis.Client) (int64, error) {
	info, err := admin.Info(ctx, "memory").Result()
	if err != nil {
		return 0, fmt.Errorf("INFO memory: %w", err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("INFO memory: used_memory %q: %w", v, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("INFO memory: no used_memory")
}
