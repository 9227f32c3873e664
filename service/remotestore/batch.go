package remotestore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/ratelimitv1"
)

// The defaults of WithBatching.
const (
	// DefaultInflight is how many Take RPCs may be in flight before
	// further Takes queue to be coalesced.
	DefaultInflight = 4
	// DefaultMaxBatch is how many queued Takes one TakeBatch RPC carries
	// at most.
	DefaultMaxBatch = 128
)

// maxBatchWait bounds a TakeBatch RPC whose callers have no deadline, so a
// stalled server never holds a pipeline slot forever.
const maxBatchWait = 30 * time.Second

// WithBatching sets how many Take RPCs may be in flight at once (inflight,
// DefaultInflight) and how many queued Takes one TakeBatch RPC carries at
// most (maxBatch, DefaultMaxBatch). A Take that finds a free slot is sent
// at once, alone, so an idle store adds no wait; Takes that find every slot
// busy queue, and the call that frees a slot sends the whole queue as one
// TakeBatch, in which each Take is decided all or nothing on its own.
// WithBatching(0, 0) sends every Take as its own RPC.
//
// A TakeBatch runs under a context of its own, bounded by the latest
// deadline of its Takes: values of a caller's context, such as outgoing
// gRPC metadata, do not travel with a coalesced Take (put per-call
// credentials in WithCallOptions, which every RPC carries).
func WithBatching(inflight, maxBatch int) Option {
	return func(s *Store) { s.inflight, s.maxBatch = inflight, maxBatch }
}

// States of a queued Take.
const (
	waiting int32 = iota
	answered
	abandoned
)

// queued is a Take waiting for a TakeBatch. It owns its request (keys
// copied: it may outlive its caller's Take) and its results: the batch
// never touches the caller's ops or out.
type queued struct {
	req      *ratelimitv1.TakeRequest
	n        int
	results  []*ratelimitv1.StoreResult
	err      error
	deadline time.Time // zero: none
	state    atomic.Int32
	done     chan struct{}
}

// batcher coalesces concurrent Takes (see WithBatching).
type batcher struct {
	s         *Store
	maxActive int
	maxBatch  int
	mu        sync.Mutex
	active    int
	queue     []*queued
}

// take decides ops: at once on a free slot, else queued for a batch.
func (b *batcher) take(ctx context.Context, ops []core.Op, out []core.Result) error {
	b.mu.Lock()
	if b.active < b.maxActive {
		b.active++
		b.mu.Unlock()
		err := b.s.takeRPC(ctx, ops, out)
		if next := b.next(); next != nil {
			go b.drain(next)
		}
		return err
	}
	q := newQueued(ctx, ops)
	b.queue = append(b.queue, q)
	b.mu.Unlock()
	select {
	case <-q.done:
	case <-ctx.Done():
		if q.state.CompareAndSwap(waiting, abandoned) {
			return fromStatus("Take", ctxStatus(ctx))
		}
		<-q.done // answered meanwhile
	}
	if q.err != nil {
		return q.err
	}
	if len(q.results) != len(ops) {
		return fmt.Errorf("remotestore: Take: %w: the server answered %d results for %d ops", ErrUnavailable, len(q.results), len(ops))
	}
	for i, r := range q.results {
		resultOf(r, &out[i])
	}
	return nil
}

// newQueued copies ops into a request of its own (keys copied, not
// aliased).
func newQueued(ctx context.Context, ops []core.Op) *queued {
	q := &queued{n: len(ops), done: make(chan struct{}, 1)}
	q.deadline, _ = ctx.Deadline()
	c := new(takeCall)
	c.fill(ops)
	for i := range c.ops {
		c.ops[i].key.own()
	}
	q.req = &c.req
	return q
}

// next takes the next batch off the queue, or releases the slot.
func (b *batcher) next() []*queued {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.active--
		return nil
	}
	n := min(len(b.queue), b.maxBatch)
	batch := append([]*queued(nil), b.queue[:n]...)
	rest := copy(b.queue, b.queue[n:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
	return batch
}

// drain sends batches until the queue is empty.
func (b *batcher) drain(batch []*queued) {
	for batch != nil {
		b.send(batch)
		batch = b.next()
	}
}

// send runs the Takes of batch still waiting as one TakeBatch RPC, bounded
// by the latest of their deadlines, and wakes their callers.
func (b *batcher) send(batch []*queued) {
	live := batch[:0:0]
	req := &ratelimitv1.TakeBatchRequest{}
	var deadline time.Time
	unbounded := false
	for _, q := range batch {
		if q.state.Load() != waiting {
			continue
		}
		live = append(live, q)
		req.Takes = append(req.Takes, q.req)
		if q.deadline.IsZero() {
			unbounded = true
		} else if q.deadline.After(deadline) {
			deadline = q.deadline
		}
	}
	if len(live) == 0 {
		return
	}
	if unbounded || time.Until(deadline) > maxBatchWait {
		deadline = time.Now().Add(maxBatchWait)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	resp := new(ratelimitv1.TakeBatchResponse)
	err := b.s.conn.Invoke(ctx, ratelimitv1.StoreService_TakeBatch_FullMethodName, req, resp, b.s.opts...)
	cancel()
	for i, q := range live {
		switch {
		case err != nil:
			q.err = fromStatus("Take", err)
		case len(resp.Outcomes) != len(live):
			q.err = fmt.Errorf("remotestore: Take: %w: the server answered %d outcomes for %d Takes", ErrUnavailable, len(resp.Outcomes), len(live))
		case resp.Outcomes[i].Error != nil:
			q.err = fromWire(resp.Outcomes[i].Error)
		default:
			q.results = resp.Outcomes[i].Results
		}
		if q.state.CompareAndSwap(waiting, answered) {
			q.done <- struct{}{}
		}
	}
}
