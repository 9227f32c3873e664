//go:build go1.25

package pipeline_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/pipeline"
)

// scall is a call of the stress test: its answer is its id doubled.
type scall struct {
	pipeline.Call
	id       int
	res      int
	err      error
	ended    time.Time // when its caller's context was cancelled (zero: not)
	mu       sync.Mutex
	sends    int // how many times a pipeline carried it
	returned bool
	alone    bool // sent by its caller (after Acquire), not by the Batcher
}

// sbackend is a backend whose pipelines take a random time, some longer
// than their bound (a backend that hangs, then resumes), and which checks,
// as each pipeline is sent, that none of its calls had left: due, or its
// caller's context cancelled at an earlier instant (synctest's clock).
type sbackend struct {
	mu     sync.Mutex
	rng    *rand.Rand
	faults []string
}

func (k *sbackend) fault(format string, args ...any) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.faults = append(k.faults, fmt.Sprintf(format, args...))
}

func (k *sbackend) send(ctx context.Context, batch []*scall) {
	now := time.Now()
	for _, c := range batch {
		c.mu.Lock()
		c.sends++
		if c.sends > 1 {
			k.fault("call %d sent %d times", c.id, c.sends)
		}
		if c.alone {
			c.mu.Unlock()
			continue // its caller's choice, bounded by its own context
		}
		if d := c.Deadline(); !d.IsZero() && !d.After(now) {
			k.fault("call %d sent at %v, due at %v", c.id, now, d)
		}
		if !c.ended.IsZero() && c.ended.Before(now) {
			k.fault("call %d sent at %v, its caller left at %v", c.id, now, c.ended)
		}
		c.mu.Unlock()
	}
	k.mu.Lock()
	took := time.Duration(k.rng.IntN(20)) * time.Millisecond
	k.mu.Unlock()
	select {
	case <-time.After(took):
		for _, c := range batch {
			c.res = 2 * c.id
		}
	case <-ctx.Done():
		for _, c := range batch {
			c.err = ctx.Err()
		}
	}
}

// Random interleavings of Acquire, Alone, Lead, Release, Wait, Enqueue,
// EnqueueContext and Await, with contexts cancelled at random instants and deadlines expiring,
// queued or in flight, on a backend that hangs for random times: no call
// is sent once it has left, none twice; every call returns by its deadline
// and its caller's leaving; a call reported answered was sent once and has
// its result, one reported failed is never answered after; no slot is
// leaked, and once idle for SenderIdle no goroutine remains (synctest
// fails a bubble that ends with one blocked).
func TestRandomInterleavings(t *testing.T) {
	stop := time.Now().Add(2 * time.Second)
	for seed := uint64(1); seed <= 400 && time.Now().Before(stop); seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { interleave(t, seed) })
		})
	}
}

func interleave(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	k := &sbackend{rng: rand.New(rand.NewPCG(seed, 8))}
	opts := pipeline.Options{
		Slots:      1 + rng.IntN(3),
		MaxBatch:   []int{1, 2, 8}[rng.IntN(3)],
		MaxWait:    time.Duration(5+rng.IntN(30)) * time.Millisecond,
		SenderIdle: time.Duration(1+rng.IntN(10)) * time.Millisecond,
	}
	b := pipeline.New(k.send, opts)
	var (
		mu    sync.Mutex
		calls []*scall
	)
	newCall := func(g *rand.Rand) *scall {
		mu.Lock()
		defer mu.Unlock()
		c := &scall{id: len(calls)}
		var d time.Time
		if g.IntN(4) > 0 {
			d = time.Now().Add(time.Duration(g.IntN(30)) * time.Millisecond)
		}
		c.Init(d)
		calls = append(calls, c)
		return c
	}
	// ctxFor returns the context of a call: one that never ends, one with
	// a deadline of its own, or one that a goroutine cancels at a random
	// instant (maybe at once), noting the instant in the calls first.
	ctxFor := func(g *rand.Rand, cs ...*scall) (context.Context, func()) {
		switch g.IntN(4) {
		case 0:
			return context.Background(), func() {}
		case 1:
			return context.WithTimeout(context.Background(), time.Duration(g.IntN(30))*time.Millisecond)
		}
		ctx, cancel := context.WithCancel(context.Background())
		after := time.Duration(g.IntN(30)) * time.Millisecond
		end := func() {
			for _, c := range cs {
				c.mu.Lock()
				c.ended = time.Now()
				c.mu.Unlock()
			}
			cancel()
		}
		if after == 0 {
			end()
			return ctx, cancel
		}
		go func() {
			time.Sleep(after)
			end()
		}()
		return ctx, cancel
	}
	// check asserts what a caller sees of c once its wait returned err.
	// (since: when the wait began; a group's calls are awaited in turn.)
	check := func(ctx context.Context, c *scall, since time.Time, how string, err error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.returned = true
		late := func(t time.Time) bool { return !t.IsZero() && time.Now().After(t) && time.Now().After(since) }
		require.False(t, late(c.Deadline()), "call %d (%s) returned after its deadline", c.id, how)
		d, _ := ctx.Deadline()
		require.False(t, late(d), "call %d (%s) returned after its context's deadline", c.id, how)
		require.False(t, late(c.ended), "call %d (%s) returned after its caller left", c.id, how)
		if err != nil {
			require.False(t, c.Answered(), "call %d failed (%v) and was answered", c.id, err)
			return
		}
		require.True(t, c.Answered(), "call %d", c.id)
		require.Equal(t, 1, c.sends, "call %d answered", c.id)
		if c.err == nil {
			require.Equal(t, 2*c.id, c.res, "call %d", c.id)
		}
	}
	var wg sync.WaitGroup
	for g := range 6 {
		gr := rand.New(rand.NewPCG(seed, uint64(100+g)))
		wg.Go(func() {
			for range 15 {
				time.Sleep(time.Duration(gr.IntN(10)) * time.Millisecond)
				if gr.IntN(4) == 0 { // a group, queued together
					group := make([]*scall, 1+gr.IntN(3))
					for i := range group {
						group[i] = newCall(gr)
					}
					ctx, cancel := ctxFor(gr, group...)
					if gr.IntN(2) == 0 {
						b.Enqueue(group...)
					} else {
						b.EnqueueContext(ctx, group...)
					}
					for _, c := range group {
						since := time.Now()
						check(ctx, c, since, "enqueue", c.Await(ctx))
					}
					cancel()
					continue
				}
				c := newCall(gr)
				ctx, cancel := ctxFor(gr, c)
				var err error
				since, how := time.Now(), "wait"
				switch {
				case !b.Acquire():
					err = b.Wait(ctx, c)
				case !b.Alone() || gr.IntN(3) == 0:
					how = "lead"
					err = b.Lead(ctx, c)
				default: // sent alone by its caller, bounded by its deadline
					how = "alone"
					sctx, scancel := ctx, func() {}
					if d := c.Deadline(); !d.IsZero() {
						sctx, scancel = context.WithDeadline(ctx, d)
					}
					c.alone = true
					k.send(sctx, []*scall{c})
					scancel()
					c.Settle()
					b.Release()
				}
				check(ctx, c, since, how, err)
				cancel()
			}
		})
	}
	wg.Wait()
	require.Empty(t, k.faults, "options %+v", opts)
	for _, c := range calls {
		require.True(t, c.returned)
		c.mu.Lock() // a pipeline that was in flight when its calls expired may still be running
		sends := c.sends
		c.mu.Unlock()
		require.LessOrEqual(t, sends, 1)
	}
	// Every pipeline and canceller ended: no slot is leaked.
	time.Sleep(max(2*opts.MaxWait, 40*time.Millisecond))
	for range opts.Slots {
		require.True(t, b.Acquire(), "a slot leaked (options %+v)", opts)
	}
	require.False(t, b.Acquire())
	for range opts.Slots {
		b.Release()
	}
	time.Sleep(2 * opts.SenderIdle) // the senders exit
}
