package remotestore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/pipeline"
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
// busy queue, and when an RPC returns the queue goes as one TakeBatch, in
// which each Take is decided all or nothing on its own. A queued Take
// returns by its context's deadline, even while the server stalls, and one
// whose caller left (or whose deadline passed) before its TakeBatch was
// sent is never sent. WithBatching(0, 0) sends every Take as its own RPC.
//
// A TakeBatch runs under a context of its own, bounded by the latest
// deadline of its Takes: values of a caller's context, such as outgoing
// gRPC metadata, do not travel with a coalesced Take (put per-call
// credentials in WithCallOptions, which every RPC carries).
func WithBatching(inflight, maxBatch int) Option {
	return func(s *Store) { s.inflight, s.maxBatch = inflight, maxBatch }
}

// queued is a Take in a TakeBatch. It owns its request (keys copied: it
// may outlive its caller's Take) and its results: the batch never touches
// the caller's ops or out.
type queued struct {
	pipeline.Call
	req     *ratelimitv1.TakeRequest
	results []*ratelimitv1.StoreResult
	err     error
}

// newBatcher returns the batcher of s's connection (see WithBatching and
// package internal/pipeline).
func newBatcher(s *Store) *pipeline.Batcher[*queued] {
	return pipeline.New(s.sendBatch, pipeline.Options{Slots: s.inflight, MaxBatch: s.maxBatch, MaxWait: maxBatchWait})
}

// takeBatched decides ops: at once, in a Take RPC of its own, on a free
// slot when no other Take is about to queue; otherwise in a TakeBatch
// with the queued Takes. A queued Take returns by its context's deadline,
// and one whose caller left before its batch was sent is never sent.
func (s *Store) takeBatched(ctx context.Context, ops []core.Op, out []core.Result) error {
	b := s.batch
	var err error
	var q *queued
	switch {
	case !b.Acquire():
		q = newQueued(ctx, ops)
		err = b.Wait(ctx, q)
	case !b.Alone():
		q = newQueued(ctx, ops)
		err = b.Lead(ctx, q)
	default:
		err = s.takeRPC(ctx, ops, out)
		b.Release()
		return err
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return fromStatus("Take", status.Error(codes.DeadlineExceeded, err.Error()))
	case err != nil:
		return fromStatus("Take", ctxStatus(ctx))
	case q.err != nil:
		return q.err
	case len(q.results) != len(ops):
		return fmt.Errorf("remotestore: Take: %w: the server answered %d results for %d ops", ErrUnavailable, len(q.results), len(ops))
	}
	for i, r := range q.results {
		resultOf(r, &out[i])
	}
	return nil
}

// newQueued copies ops into a request of its own (keys copied, not
// aliased), due by ctx's deadline.
func newQueued(ctx context.Context, ops []core.Op) *queued {
	q := &queued{}
	deadline, _ := ctx.Deadline()
	q.Init(deadline)
	c := new(takeCall)
	c.fill(ops)
	for i := range c.ops {
		c.ops[i].key.own()
	}
	q.req = &c.req
	return q
}

// sendBatch runs the Takes of batch as one TakeBatch RPC, bounded by ctx
// (the latest of their deadlines), and sets each one's results or error.
func (s *Store) sendBatch(ctx context.Context, batch []*queued) {
	req := &ratelimitv1.TakeBatchRequest{Takes: make([]*ratelimitv1.TakeRequest, len(batch))}
	for i, q := range batch {
		req.Takes[i] = q.req
	}
	resp := new(ratelimitv1.TakeBatchResponse)
	err := s.conn.Invoke(ctx, ratelimitv1.StoreService_TakeBatch_FullMethodName, req, resp, s.opts...)
	for i, q := range batch {
		switch {
		case err != nil:
			q.err = fromStatus("Take", err)
		case len(resp.Outcomes) != len(batch):
			q.err = fmt.Errorf("remotestore: Take: %w: the server answered %d outcomes for %d Takes", ErrUnavailable, len(resp.Outcomes), len(batch))
		case resp.Outcomes[i].Error != nil:
			q.err = fromWire(resp.Outcomes[i].Error)
		default:
			q.results = resp.Outcomes[i].Results
		}
	}
}
