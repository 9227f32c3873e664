// Package pipeline coalesces concurrent calls to one backend connection
// into pipelines: the coalescing batcher of sluice's Redis store
// (core/redisstore, one per Redis node) and of ratelimitd's remote store
// (service/remotestore, one per connection), written once.
//
// A call that finds a free slot (Acquire) is sent at once by its own
// caller, alone, so an idle backend adds no wait and no goroutine. Calls
// that find every slot busy queue (Wait); when a pipeline returns, the
// queue goes as the next pipeline, at most MaxBatch calls in one. With one
// slot, concurrent calls share one write and one read instead of one each,
// and the window a batch gathers in is the round trip of the pipeline
// before it: no timer is armed on the way.
//
// Queued pipelines are sent by the Batcher's senders: at most one
// goroutine per slot, started when a pipeline finds none free, which sends
// pipelines back to back while calls queue, then parks, and exits once it
// has had none to send for SenderIdle. Under load no goroutine is started
// per pipeline, and a sender's stack, grown through the client once, is
// reused; an idle Batcher holds no goroutine.
//
// Each queued call waits for its own answer, its context or its deadline,
// whichever comes first, so a stalled backend never holds a caller past
// its deadline, queued or in flight. One timer per Batcher (the watchdog),
// armed only while calls wait, expires the calls whose deadline has
// passed, instead of a timer per call. A call whose caller left, or whose
// deadline passed, before its pipeline was sent is never sent: it consumes
// nothing. Every call is answered exactly once: by its pipeline, by the
// watchdog or by its caller leaving.
package pipeline

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// States of a call.
const (
	waiting   int32 = iota
	answered        // its pipeline answered it (its results are set)
	expired         // its deadline passed first
	abandoned       // its caller's context ended first
)

// Call is the part of a call that the Batcher owns: embed it in the call
// type (a struct used through a pointer). Init it before each use. A Call
// may be reused (pooled) once Answered reports true: nothing else holds it
// then. It must not be copied after first use.
type Call struct {
	deadline time.Time
	// ctx is the caller's context (Wait, Lead): a call whose context has
	// ended leaves the queue unsent even before its caller's goroutine
	// has run to abandon it.
	ctx context.Context
	// state moves once, from waiting to one of the others; whoever moves
	// it to answered (by Answer) or expired signals done (capacity 1).
	state atomic.Int32
	done  chan struct{}
}

// Member is a call type a Batcher carries: a pointer to a struct that
// embeds Call.
type Member interface {
	pipelineCall() *Call
}

func (c *Call) pipelineCall() *Call { return c }

// Init readies c for a new use, due by deadline (zero: none).
func (c *Call) Init(deadline time.Time) {
	c.deadline, c.ctx = deadline, nil
	c.state.Store(waiting)
	if c.done == nil {
		c.done = make(chan struct{}, 1)
	}
}

// Deadline returns the deadline c was initialised with.
func (c *Call) Deadline() time.Time { return c.deadline }

// Answered reports whether c was answered (by Answer or Settle): its
// caller has its result and nothing else refers to it. A call that
// expired or was abandoned may still be in a queue or a pipeline.
func (c *Call) Answered() bool { return c.state.Load() == answered }

// Answer moves a waiting c to answered and wakes its Await; it reports
// whether it did (false: c had expired or been abandoned). Set c's results
// before.
func (c *Call) Answer() bool { return c.finish(answered) }

// Settle marks c answered by its own caller, who ran it on its goroutine
// and has its results: there is nothing to wake.
func (c *Call) Settle() { c.state.Store(answered) }

func (c *Call) finish(state int32) bool {
	if !c.state.CompareAndSwap(waiting, state) {
		return false
	}
	c.done <- struct{}{}
	return true
}

// gone reports whether c, about to go in a pipeline sent at now, must
// not: it is no longer waiting, or it leaves now, abandoned if its
// caller's context has ended (the caller's Await returns its error, even
// when its goroutine has not run to notice yet), expired if its deadline
// has passed (even when the watchdog has not run yet). Either way it is
// never sent, so it consumes nothing.
func (c *Call) gone(now time.Time) bool {
	switch {
	case c.ctx != nil && c.ctx.Err() != nil:
		c.state.CompareAndSwap(waiting, abandoned)
	case !c.deadline.IsZero() && !c.deadline.After(now):
		c.finish(expired)
	}
	return c.state.Load() != waiting
}

// Await waits until c is answered (nil: its results are set),
// its deadline has passed (context.DeadlineExceeded) or ctx ends first
// (ctx's error: c is abandoned, its results are not read).
func (c *Call) Await(ctx context.Context) error {
	if done := ctx.Done(); done == nil {
		<-c.done // ctx never ends (a decision's detached context): no select over it
	} else {
		select {
		case <-c.done:
		case <-done:
			if c.state.CompareAndSwap(waiting, abandoned) || c.state.Load() == abandoned {
				return ctx.Err() // abandoned here, or by the Batcher (take)
			}
			<-c.done // answered or expired meanwhile
		}
	}
	if c.state.Load() == expired {
		return context.DeadlineExceeded
	}
	return nil
}

// Options configures a Batcher.
type Options struct {
	// Slots is how many pipelines may be in flight at once (at least 1).
	// One is the deepest: each call that finds a slot free goes alone, so
	// more slots mean smaller pipelines.
	Slots int
	// MaxBatch is how many calls one pipeline carries at most (at least
	// 1).
	MaxBatch int
	// MaxWait bounds a pipeline whose calls have no deadline, or one
	// further away, so that a stalled backend never holds a slot for ever.
	MaxWait time.Duration
	// SenderIdle is how long a sender waits for another pipeline before
	// it exits (0: DefaultSenderIdle).
	SenderIdle time.Duration
}

// DefaultSenderIdle is Options.SenderIdle's default.
const DefaultSenderIdle = time.Second

// Batcher pipelines concurrent calls of type T (see the package doc). It
// is safe for concurrent use; it holds at most one goroutine per slot (its
// senders), and none once idle for SenderIdle.
type Batcher[T Member] struct {
	send   func(ctx context.Context, batch []T)
	opts   Options
	mu     sync.Mutex
	active int
	queue  []T
	flying [][]T // the pipelines in flight that Wait's calls are in
	// watchdog expires the waiting calls whose deadline has passed; armed
	// is when it fires (zero: disarmed).
	watchdog *time.Timer
	armed    time.Time
	// contended: a call queued since the last call sent alone was
	// released with nothing queued behind it.
	contended atomic.Bool
	// pipelines and calls count the pipelines sent (a call alone after
	// Acquire is one) and the calls they carried; senders counts the
	// senders started.
	pipelines, calls, senders uint64
	// idle are the parked senders, each waiting on its channel for a
	// pipeline to send.
	idle []chan []T
}

// New returns a Batcher sending each pipeline with send, which runs the
// calls of batch (every one of them still waiting when the pipeline was
// formed) as one pipeline bounded by ctx, and sets each call's results; the
// Batcher then answers them. send is never called with an empty batch.
func New[T Member](send func(ctx context.Context, batch []T), opts Options) *Batcher[T] {
	opts.Slots, opts.MaxBatch = max(opts.Slots, 1), max(opts.MaxBatch, 1)
	if opts.MaxWait <= 0 {
		opts.MaxWait = 30 * time.Second
	}
	if opts.SenderIdle <= 0 {
		opts.SenderIdle = DefaultSenderIdle
	}
	b := &Batcher[T]{send: send, opts: opts}
	b.watchdog = time.AfterFunc(time.Hour, b.expire)
	b.watchdog.Stop()
	return b
}

// Acquire takes a free slot, if there is one: the caller then sends its
// call itself, alone, bounded by its own deadline, and calls Release once
// it has its answer. Otherwise it reports false: Wait.
func (b *Batcher[T]) Acquire() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.active >= b.opts.Slots {
		return false
	}
	b.active++
	b.pipelines++
	b.calls++
	return true
}

// Alone is called after Acquire, before the caller sends its call: while
// the Batcher is contended (a call queued during the last pipeline sent
// alone, or calls are queued), it yields the processor once
// (runtime.Gosched), so that concurrent callers that are runnable reach
// the Batcher and queue, and reports whether none did. If one did, the
// caller makes its call and hands it to Lead, which sends them together;
// if none did, the caller sends its call alone. An uncontended Batcher
// (one caller at a time) does not yield: a lone call adds no wait.
func (b *Batcher[T]) Alone() bool {
	if !b.contended.Load() {
		return true
	}
	runtime.Gosched()
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue) == 0
}

// Lead sends c, with the calls queued behind it, as one pipeline on the
// slot the caller took with Acquire (by a sender), and waits for c as Wait
// does. The slot is the pipeline's: do not Release it.
func (b *Batcher[T]) Lead(ctx context.Context, c T) error {
	c.pipelineCall().ctx = ctx
	b.mu.Lock()
	b.pipelines-- // Acquire counted c as a pipeline of its own: it goes in this one
	b.calls--
	b.queue = slices.Insert(b.queue, 0, c)
	if d := c.pipelineCall().deadline; !d.IsZero() {
		b.arm(d)
	}
	batch := b.take()
	if batch == nil {
		b.active-- // c's context ended already, and nothing else waits
	}
	b.mu.Unlock()
	b.dispatch(batch)
	return c.pipelineCall().Await(ctx)
}

// Release frees the slot taken by Acquire, or, when calls queued
// meanwhile, sends them on it as the next pipeline (by a sender: the
// caller returns with its answer).
func (b *Batcher[T]) Release() {
	b.dispatch(b.next(nil, nil))
}

// Wait queues c (Init'ed) for the next pipeline and waits for it: nil once
// c is answered (its results set by send), context.DeadlineExceeded once its
// deadline has passed, ctx's error if ctx ends first. c is never sent
// once ctx has ended or its deadline has passed before its pipeline is
// sent, whether or not Wait has returned by then.
func (b *Batcher[T]) Wait(ctx context.Context, c T) error {
	pc := c.pipelineCall()
	pc.ctx = ctx
	b.contended.Store(true)
	b.mu.Lock()
	b.queue = append(b.queue, c)
	if d := pc.deadline; !d.IsZero() {
		b.arm(d)
	}
	var batch []T
	if b.active < b.opts.Slots { // a slot was freed since Acquire
		b.active++
		if batch = b.take(); batch == nil {
			b.active--
		}
	}
	b.mu.Unlock()
	b.dispatch(batch)
	return pc.Await(ctx)
}

// Enqueue queues calls (Init'ed) together, so that they go in one
// pipeline (up to MaxBatch), at once on a free slot; their callers then
// wait for each with its Await. A call is never sent once its Await has
// returned an error before its pipeline was formed.
func (b *Batcher[T]) Enqueue(calls ...T) {
	b.contended.Store(true)
	b.mu.Lock()
	b.queue = append(b.queue, calls...)
	for _, c := range calls {
		if d := c.pipelineCall().deadline; !d.IsZero() {
			b.arm(d)
		}
	}
	var batch []T
	if b.active < b.opts.Slots {
		b.active++
		if batch = b.take(); batch == nil {
			b.active--
		}
	}
	b.mu.Unlock()
	b.dispatch(batch)
}

// EnqueueContext is Enqueue for calls made for one caller, whose context
// is ctx: once ctx has ended, none of them is sent, also those whose Await
// has not been called yet (a caller awaiting them in turn has left for all
// of them when the first Await returns ctx's error).
func (b *Batcher[T]) EnqueueContext(ctx context.Context, calls ...T) {
	for _, c := range calls {
		c.pipelineCall().ctx = ctx
	}
	b.Enqueue(calls...)
}

// Stats returns how many pipelines were sent so far (a call sent alone
// after Acquire is one) and how many calls they carried.
func (b *Batcher[T]) Stats() (pipelines, calls uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pipelines, b.calls
}

// Senders returns how many sender goroutines were started so far (see the
// package doc).
func (b *Batcher[T]) Senders() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.senders
}

// Queued returns how many calls wait in the queue (some may have expired
// or been abandoned: they leave it when the next pipeline is formed).
func (b *Batcher[T]) Queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// arm makes the watchdog fire by t at the latest.
func (b *Batcher[T]) arm(t time.Time) {
	if b.armed.IsZero() || t.Before(b.armed) {
		b.armed = t
		b.watchdog.Reset(time.Until(t))
	}
}

// expire is the watchdog: it expires every waiting call whose deadline has
// passed (a queued one leaves the queue: it is never sent), and rearms for
// the earliest deadline left.
func (b *Batcher[T]) expire() {
	now := time.Now()
	var next time.Time
	check := func(m T) (gone bool) {
		c := m.pipelineCall()
		if c.state.Load() != waiting {
			return true
		}
		if c.deadline.IsZero() {
			return false
		}
		if !c.deadline.After(now) {
			c.finish(expired)
			return true
		}
		if next.IsZero() || c.deadline.Before(next) {
			next = c.deadline
		}
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, batch := range b.flying {
		for _, c := range batch {
			check(c)
		}
	}
	b.queue = slices.DeleteFunc(b.queue, check)
	b.armed = time.Time{}
	if !next.IsZero() {
		b.arm(next)
	}
}

// next ends the pipeline in flight done (nil for a call sent after
// Acquire) and takes the next one off the queue, or frees the slot; a
// sender freeing it (its channel ch) parks in the same step, so that the
// next pipeline finds it.
func (b *Batcher[T]) next(done []T, ch chan []T) []T {
	b.mu.Lock()
	defer b.mu.Unlock()
	if done != nil {
		if i := slices.IndexFunc(b.flying, func(f []T) bool { return &f[0] == &done[0] }); i >= 0 {
			b.flying = slices.Delete(b.flying, i, i+1)
		}
	}
	batch := b.take()
	if batch == nil {
		b.active--
		if ch != nil {
			b.idle = append(b.idle, ch)
		}
		if done == nil {
			b.contended.Store(false) // nothing queued behind a call sent alone
		}
	}
	return batch
}

// take moves up to MaxBatch waiting calls from the queue to a new
// pipeline in flight and returns it (nil: none waits). Calls no longer
// waiting, or whose caller's context has ended (abandoned here: the
// caller's Await returns its error), leave the queue unsent; those whose
// deadline has passed as the pipeline is sent are dropped then (see live).
func (b *Batcher[T]) take() []T {
	var batch []T
	i := 0
	for ; i < len(b.queue) && len(batch) < b.opts.MaxBatch; i++ {
		c := b.queue[i]
		if pc := c.pipelineCall(); pc.ctx != nil && pc.ctx.Err() != nil {
			pc.state.CompareAndSwap(waiting, abandoned)
		}
		if c.pipelineCall().state.Load() == waiting {
			if batch == nil {
				batch = make([]T, 0, min(len(b.queue)-i, b.opts.MaxBatch))
			}
			batch = append(batch, c)
		}
	}
	rest := copy(b.queue, b.queue[i:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
	if batch != nil {
		b.flying = append(b.flying, batch)
		b.pipelines++
		b.calls += uint64(len(batch))
	}
	return batch
}

// dispatch has batch (nil: none) sent by a parked sender, or by a sender
// started for it when none is parked.
func (b *Batcher[T]) dispatch(batch []T) {
	if batch == nil {
		return
	}
	b.mu.Lock()
	if n := len(b.idle); n > 0 {
		ch := b.idle[n-1]
		b.idle[n-1] = nil
		b.idle = b.idle[:n-1]
		b.mu.Unlock()
		ch <- batch // capacity 1: never blocks
		return
	}
	b.senders++
	b.mu.Unlock()
	go b.sender(batch)
}

// sender sends batch and the pipelines that follow it, then parks (in
// next, as it frees the slot) until dispatch hands it another, or exits
// after SenderIdle without one.
func (b *Batcher[T]) sender(batch []T) {
	ch := make(chan []T, 1)
	idle := time.NewTimer(b.opts.SenderIdle)
	defer idle.Stop()
	for {
		b.drain(batch, ch)
		idle.Reset(b.opts.SenderIdle)
		select {
		case batch = <-ch:
			continue
		case <-idle.C:
		}
		b.mu.Lock()
		i := slices.Index(b.idle, ch)
		if i >= 0 {
			b.idle = slices.Delete(b.idle, i, i+1)
		}
		b.mu.Unlock()
		if i >= 0 {
			return
		}
		batch = <-ch // dispatch took ch as the timer fired: it sends one
	}
}

// drain sends pipelines until the queue is empty, then parks the sender
// of ch. A pipeline leaves the flying list before its callers are woken:
// once woken, a call may be reused. A call that expired or was abandoned
// since its pipeline was formed is not sent.
func (b *Batcher[T]) drain(batch []T, ch chan []T) {
	for batch != nil {
		if live := b.live(batch); len(live) > 0 {
			ctx, cancel := context.WithDeadline(context.Background(), b.bound(live))
			b.send(ctx, live)
			cancel()
		}
		next := b.next(batch, ch)
		for _, c := range batch {
			c.pipelineCall().finish(answered)
		}
		batch = next
	}
}

// live returns the calls of batch still waiting as it is sent (see gone),
// in a slice of its own (batch itself is the flying list's, which the
// watchdog reads) only when some are not; Stats no longer counts the
// others (nor the pipeline, when none is left).
func (b *Batcher[T]) live(batch []T) []T {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	i := slices.IndexFunc(batch, func(c T) bool { return c.pipelineCall().gone(now) })
	if i < 0 {
		return batch
	}
	live := slices.Clone(batch[:i])
	for _, c := range batch[i+1:] {
		if !c.pipelineCall().gone(now) {
			live = append(live, c)
		}
	}
	b.calls -= uint64(len(batch) - len(live))
	if len(live) == 0 {
		b.pipelines--
	}
	return live
}

// bound returns the deadline of a pipeline: the latest of its calls',
// within MaxWait from now.
func (b *Batcher[T]) bound(batch []T) time.Time {
	limit := time.Now().Add(b.opts.MaxWait)
	var latest time.Time
	for _, c := range batch {
		d := c.pipelineCall().deadline
		if d.IsZero() || d.After(limit) {
			return limit
		}
		if d.After(latest) {
			latest = d
		}
	}
	return latest
}
