//go:build go1.25

package pipeline_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/pipeline"
)

// tcall is a call whose answer is its id doubled.
type tcall struct {
	pipeline.Call
	id, res int
	err     error
}

// backend records the pipelines it is sent and holds each until released
// (a stalled server while it is not).
type backend struct {
	mu      sync.Mutex
	batches [][]int // the ids of each pipeline, in the order sent
	hold    chan struct{}
}

func newBackend() *backend { return &backend{hold: make(chan struct{})} }

func (k *backend) send(ctx context.Context, batch []*tcall) {
	ids := make([]int, len(batch))
	for i, c := range batch {
		ids[i] = c.id
	}
	k.mu.Lock()
	k.batches = append(k.batches, ids)
	k.mu.Unlock()
	select {
	case <-k.hold:
	case <-ctx.Done(): // the pipeline's bound
		for _, c := range batch {
			c.err = ctx.Err()
		}
		return
	}
	for _, c := range batch {
		c.res = 2 * c.id
	}
}

func (k *backend) sent() [][]int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([][]int(nil), k.batches...)
}

// outlastSenders waits, in a synctest bubble, until the Batchers' parked
// senders have exited (SenderIdle after their last pipeline).
func outlastSenders() { time.Sleep(2 * pipeline.DefaultSenderIdle) }

func newCall(id int, deadline time.Time) *tcall {
	c := &tcall{id: id}
	c.Init(deadline)
	return c
}

// leader takes the slot of b and holds it until the returned function is
// called, as a caller sending its call alone does.
func leader(t *testing.T, b *pipeline.Batcher[*tcall]) (release func()) {
	require.True(t, b.Acquire())
	require.True(t, b.Alone(), "nothing queued yet")
	return b.Release
}

// Calls that queue while the one slot is busy go out together, in one
// pipeline, when it frees; each is answered once, with its own result.
func TestQueuedCallsShareOnePipeline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		defer outlastSenders()
		k := newBackend()
		close(k.hold)
		b := pipeline.New(k.send, pipeline.Options{Slots: 1, MaxBatch: 100})
		release := leader(t, b)
		const n = 50
		calls := make([]*tcall, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			calls[i] = newCall(i, time.Now().Add(time.Second))
			wg.Go(func() { errs[i] = b.Wait(t.Context(), calls[i]) })
		}
		synctest.Wait() // every call queued
		require.Empty(t, k.sent(), "nothing is sent while the slot is held")
		release()
		wg.Wait()
		require.Len(t, k.sent(), 1, "one pipeline for the queue")
		require.Len(t, k.sent()[0], n)
		for i, c := range calls {
			require.NoError(t, errs[i])
			require.Equal(t, 2*i, c.res)
			require.True(t, c.Answered())
		}
		p, c := b.Stats()
		require.Equal(t, uint64(2), p)
		require.Equal(t, uint64(n+1), c)
		require.True(t, b.Acquire(), "the slot is free again")
	})
}

// A pipeline carries at most MaxBatch calls; the rest follow in the next.
func TestMaxBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		defer outlastSenders()
		k := newBackend()
		close(k.hold)
		b := pipeline.New(k.send, pipeline.Options{Slots: 1, MaxBatch: 4})
		release := leader(t, b)
		var wg sync.WaitGroup
		for i := range 10 {
			wg.Go(func() { require.NoError(t, b.Wait(t.Context(), newCall(i, time.Time{}))) })
		}
		synctest.Wait()
		release()
		wg.Wait()
		var sizes []int
		for _, ids := range k.sent() {
			sizes = append(sizes, len(ids))
		}
		require.Equal(t, []int{4, 4, 2}, sizes)
	})
}

// A caller that finds calls queued after taking the slot sends its call
// with them (Lead), first, in one pipeline.
func TestLeadTakesTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		defer outlastSenders()
		k := newBackend()
		close(k.hold)
		b := pipeline.New(k.send, pipeline.Options{Slots: 1, MaxBatch: 100})
		require.True(t, b.Acquire())
		var wg sync.WaitGroup
		for i := 1; i <= 3; i++ {
			wg.Go(func() { require.NoError(t, b.Wait(t.Context(), newCall(i, time.Time{}))) })
			synctest.Wait() // queued in this order
		}
		require.False(t, b.Alone())
		c := newCall(0, time.Time{})
		require.NoError(t, b.Lead(t.Context(), c))
		wg.Wait()
		require.Equal(t, [][]int{{0, 1, 2, 3}}, k.sent())
		require.Equal(t, 0, c.res)
	})
}

// Under a stalled backend every call returns at its own deadline, queued
// or in flight, not at the pipeline's bound nor after the call ahead of
// it; the calls whose deadline passed in the queue are never sent; and the
// slot is freed at the bound of the pipeline in flight (the latest
// deadline of its calls).
func TestDeadlinesUnderAStall(t *testing.T) {
	// On a context that ends (a caller's) and on one that never does (a
	// decision's, detached from its caller's): the deadlines alone end the
	// waits.
	t.Run("context", func(t *testing.T) { testDeadlinesUnderAStall(t, true) })
	t.Run("no end", func(t *testing.T) { testDeadlinesUnderAStall(t, false) })
}

func testDeadlinesUnderAStall(t *testing.T, ends bool) {
	synctest.Test(t, func(t *testing.T) {
		defer outlastSenders()
		ctx := context.Background()
		if ends {
			ctx = t.Context()
		}
		k := newBackend() // never released: stalled
		b := pipeline.New(k.send, pipeline.Options{Slots: 1, MaxBatch: 100, MaxWait: time.Hour})
		release := leader(t, b)
		start := time.Now()
		type result struct {
			took time.Duration
			err  error
		}
		results := make([]result, 6)
		var wg sync.WaitGroup
		wait := func(i int, c *tcall) {
			wg.Go(func() {
				err := b.Wait(ctx, c)
				if err == nil {
					err = c.err // answered at the pipeline's bound
				}
				results[i] = result{time.Since(start), err}
			})
			synctest.Wait() // queued in this order
		}
		// In flight: calls 0..2, due at 30, 10 and 20 ms.
		for i, d := range []time.Duration{30, 10, 20} {
			wait(i, newCall(i, start.Add(d*time.Millisecond)))
		}
		synctest.Wait()
		release() // 0..2 are sent, and stall
		synctest.Wait()
		require.Equal(t, [][]int{{0, 1, 2}}, k.sent())
		// Queued behind them: 3..5, due at 5, 25 and 40 ms.
		for i, d := range []time.Duration{5, 25, 40} {
			wait(3+i, newCall(3+i, start.Add(d*time.Millisecond)))
		}
		wg.Wait()
		for i, want := range []time.Duration{30, 10, 20, 5, 25, 40} {
			require.ErrorIs(t, results[i].err, context.DeadlineExceeded, "call %d", i)
			require.Equal(t, want*time.Millisecond, results[i].took, "call %d", i)
		}
		// At 30 ms the stalled pipeline reached its bound and the slot
		// went to the queue: 3 (expired at 5 ms) and 4 (at 25 ms) were
		// never sent, 5 was.
		require.Equal(t, [][]int{{0, 1, 2}, {5}}, k.sent())
	})
}

// A call whose caller leaves while it is queued is never sent; the others
// of its queue are.
func TestAbandonedCallIsNeverSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		defer outlastSenders()
		halfAbandoned(t, func(end, release func()) {
			end()
			synctest.Wait() // the callers have returned
			release()
		})
	})
}

// A call whose caller's context has ended is never sent, even when its
// pipeline is formed before the caller's goroutine has run to notice: the
// Batcher looks at the context itself. On one processor the waiters cannot
// run between the cancels and the release (the test's goroutine does not
// block), as on a loaded machine they need not.
func TestEndedCallIsNeverSentBeforeItsCallerRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		defer outlastSenders()
		halfAbandoned(t, func(end, release func()) {
			procs := runtime.GOMAXPROCS(1)
			end()
			release()
			runtime.GOMAXPROCS(procs)
		})
	})
}

// halfAbandoned queues calls 0 to 5 behind a slot held by a leader, then
// has endThenRelease end the contexts of the even ones and release the
// slot: the even calls' callers get their context's error and were never
// sent; the odd ones went in one pipeline.
func halfAbandoned(t *testing.T, endThenRelease func(end, release func())) {
	k := newBackend()
	close(k.hold)
	b := pipeline.New(k.send, pipeline.Options{Slots: 1, MaxBatch: 100})
	release := leader(t, b)
	var wg sync.WaitGroup
	errs := make([]error, 6)
	cancels := make([]context.CancelFunc, 6)
	for i := range 6 {
		ctx, cancel := context.WithCancel(t.Context())
		cancels[i] = cancel
		wg.Go(func() { errs[i] = b.Wait(ctx, newCall(i, time.Time{})) })
		synctest.Wait() // queued in this order
	}
	endThenRelease(func() {
		for i := 0; i < 6; i += 2 {
			cancels[i]()
		}
	}, release)
	wg.Wait()
	for i := range 6 {
		if i%2 == 0 {
			require.ErrorIs(t, errs[i], context.Canceled, "call %d", i)
		} else {
			require.NoError(t, errs[i], "call %d", i)
		}
		cancels[i]()
	}
	require.Equal(t, [][]int{{1, 3, 5}}, k.sent())
}

// A slot freed between a failed Acquire and Wait is not lost: Wait sends
// the queue on it.
func TestWaitTakesAFreedSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		defer outlastSenders()
		k := newBackend()
		close(k.hold)
		b := pipeline.New(k.send, pipeline.Options{Slots: 1, MaxBatch: 100})
		release := leader(t, b)
		require.False(t, b.Acquire())
		release()
		c := newCall(7, time.Time{})
		require.NoError(t, b.Wait(t.Context(), c))
		require.Equal(t, 14, c.res)
		require.Equal(t, [][]int{{7}}, k.sent())
	})
}

// Queued pipelines, one after another, are sent by one sender goroutine,
// started for the first and parked in between; once it has had nothing to
// send for SenderIdle it exits, and the next pipeline starts another.
func TestPipelinesReuseOneSender(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		defer outlastSenders()
		k := newBackend()
		close(k.hold)
		b := pipeline.New(k.send, pipeline.Options{Slots: 1, MaxBatch: 100})
		round := func(first int) {
			release := leader(t, b)
			var wg sync.WaitGroup
			for i := first; i < first+3; i++ {
				wg.Go(func() { require.NoError(t, b.Wait(t.Context(), newCall(i, time.Time{}))) })
			}
			synctest.Wait()
			release()
			wg.Wait()
		}
		for r := range 3 {
			round(3 * r)
		}
		require.Len(t, k.sent(), 3, "a pipeline a round")
		for _, ids := range k.sent() {
			require.Len(t, ids, 3)
		}
		require.Equal(t, uint64(1), b.Senders(), "one sender for the three")
		time.Sleep(pipeline.DefaultSenderIdle - time.Nanosecond)
		round(9)
		require.Equal(t, uint64(1), b.Senders(), "still parked")
		time.Sleep(pipeline.DefaultSenderIdle)
		round(12)
		require.Equal(t, uint64(2), b.Senders(), "the first exited when idle")
	})
}

// Under concurrent callers that keep the one slot busy, every pipeline is
// sent by the one sender, and each call is answered once with its own
// result and counted once (a call led by its caller is not also counted
// as a pipeline of its own).
func TestBackToBackPipelinesUseOneSender(t *testing.T) {
	k := newBackend()
	close(k.hold)
	b := pipeline.New(k.send, pipeline.Options{Slots: 1, MaxBatch: 8, SenderIdle: time.Hour})
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 200 {
				c := newCall(g*1000+i, time.Now().Add(time.Minute))
				var err error
				switch {
				case !b.Acquire():
					err = b.Wait(context.Background(), c)
				case !b.Alone():
					err = b.Lead(context.Background(), c)
				default:
					k.send(context.Background(), []*tcall{c})
					c.Settle()
					b.Release()
				}
				require.NoError(t, err)
				require.Equal(t, 2*c.id, c.res)
			}
		})
	}
	wg.Wait()
	require.LessOrEqual(t, b.Senders(), uint64(1))
	_, calls := b.Stats()
	require.Equal(t, uint64(16*200), calls)
}

// A Lead whose caller's context has ended, with nothing else queued, sends
// nothing and frees its slot.
func TestLeadWithAnEndedContextFreesTheSlot(t *testing.T) {
	k := newBackend()
	close(k.hold)
	b := pipeline.New(k.send, pipeline.Options{Slots: 1, MaxBatch: 100})
	require.True(t, b.Acquire())
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, b.Lead(ctx, newCall(0, time.Time{})), context.Canceled)
	require.Empty(t, k.sent())
	require.True(t, b.Acquire(), "the slot is free")
}

// A Wait whose caller's context has ended, finding the slot free and
// nothing else queued, sends nothing and leaves the slot free.
func TestWaitWithAnEndedContextLeavesTheSlotFree(t *testing.T) {
	k := newBackend()
	close(k.hold)
	b := pipeline.New(k.send, pipeline.Options{Slots: 1, MaxBatch: 100})
	release := leader(t, b)
	require.False(t, b.Acquire())
	release()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, b.Wait(ctx, newCall(0, time.Time{})), context.Canceled)
	require.Empty(t, k.sent())
	require.True(t, b.Acquire(), "the slot is free")
}
