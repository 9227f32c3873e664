package remotestore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/pipeline"
	"github.com/sluicehq/sluice/service/ratelimitv1"
)

// Store is a core.Store whose state lives in ratelimitd: every method is
// one RPC of sluice.ratelimit.v1.StoreService on one connection, decided by
// the server's store. It is safe for concurrent use; concurrent calls are
// multiplexed on the connection's HTTP/2 streams.
type Store struct {
	conn   grpc.ClientConnInterface
	opts   []grpc.CallOption
	closed atomic.Bool
	calls  sync.Pool // of *takeCall

	inflight, maxBatch int
	batch              *pipeline.Batcher[*queued] // nil: every Take is its own RPC
}

// Option configures a Store.
type Option func(*Store)

// WithCallOptions adds gRPC call options to every RPC (compression, a
// per-call credential, grpc.WaitForReady(true) to wait for the connection
// instead of failing fast: under a guard, prefer failing fast).
func WithCallOptions(opts ...grpc.CallOption) Option {
	return func(s *Store) { s.opts = append(s.opts, opts...) }
}

// New returns a Store calling ratelimitd over conn (a *grpc.ClientConn).
// The Store does not own conn: close it after the Store's last use.
func New(conn grpc.ClientConnInterface, opts ...Option) *Store {
	s := &Store{conn: conn, inflight: DefaultInflight, maxBatch: DefaultMaxBatch}
	for _, o := range opts {
		o(s)
	}
	s.calls.New = func() any { return new(takeCall) }
	if s.inflight > 0 && s.maxBatch > 0 {
		s.batch = newBatcher(s)
	}
	return s
}

// Close makes every later call fail with an error wrapping core.ErrClosed.
// It does not close the connection. Close is idempotent.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}

// maxPooledOps bounds the ops of a request kept in the pool for reuse.
const maxPooledOps = 16

// wireOp holds a StoreOp and what it points to, to be filled in place.
type wireOp struct {
	op       ratelimitv1.StoreOp
	key      wireKey
	limit    wireLimit
	maxDelay durationpb.Duration
}

// takeCall is a TakeRequest reused across Takes: filling it allocates
// nothing, and the keys' strings are aliased, not copied (they are only
// read while the call marshals the request, and cleared before the
// takeCall returns to the pool).
type takeCall struct {
	req  ratelimitv1.TakeRequest
	ptrs []*ratelimitv1.StoreOp
	ops  []wireOp
}

func (c *takeCall) fill(ops []core.Op) {
	if cap(c.ops) < len(ops) {
		c.ops = make([]wireOp, len(ops))
		c.ptrs = make([]*ratelimitv1.StoreOp, len(ops))
	}
	c.ops, c.ptrs = c.ops[:len(ops)], c.ptrs[:len(ops)]
	for i := range ops {
		w, op := &c.ops[i], &ops[i]
		w.op.Key = w.key.set(op.Key)
		w.op.Limit = w.limit.set(op.Limit)
		w.op.Cost = op.Cost
		w.op.Shadow = op.Shadow
		w.op.MaxDelay = nil
		if op.MaxDelay != 0 {
			setDuration(&w.maxDelay, op.MaxDelay)
			w.op.MaxDelay = &w.maxDelay
		}
		c.ptrs[i] = &w.op
	}
	c.req.Ops = c.ptrs
}

func (c *takeCall) clear() {
	for i := range c.ops {
		c.ops[i].key.clear()
	}
	c.req.Ops = nil
}

func (s *Store) open(method string) error {
	if s.closed.Load() {
		return fmt.Errorf("remotestore: %s: %w", method, core.ErrClosed)
	}
	return nil
}

// Take decides ops all or nothing on the server's store (see
// core.Store.Take): in one Take RPC, or, when that many are in flight
// already, in one TakeBatch RPC with other queued Takes (see WithBatching).
func (s *Store) Take(ctx context.Context, ops []core.Op, out []core.Result) error {
	if len(out) != len(ops) {
		return fmt.Errorf("remotestore: Take: %d results for %d ops", len(out), len(ops))
	}
	if err := s.open("Take"); err != nil {
		return err
	}
	if len(ops) == 0 {
		return nil
	}
	if s.batch != nil {
		return s.takeBatched(ctx, ops, out)
	}
	return s.takeRPC(ctx, ops, out)
}

// takeRPC decides ops in one Take RPC.
func (s *Store) takeRPC(ctx context.Context, ops []core.Op, out []core.Result) error {
	c := s.calls.Get().(*takeCall)
	c.fill(ops)
	resp := new(ratelimitv1.TakeResponse)
	err := s.conn.Invoke(ctx, ratelimitv1.StoreService_Take_FullMethodName, &c.req, resp, s.opts...)
	c.clear()
	if len(ops) <= maxPooledOps {
		s.calls.Put(c)
	}
	if err != nil {
		return fromStatus("Take", err)
	}
	if len(resp.Results) != len(ops) {
		return fmt.Errorf("remotestore: Take: %w: the server answered %d results for %d ops", ErrUnavailable, len(resp.Results), len(ops))
	}
	for i, r := range resp.Results {
		resultOf(r, &out[i])
	}
	return nil
}

// Refund gives back one admission on the server's store (see
// core.Store.Refund).
func (s *Store) Refund(ctx context.Context, a core.Admission) error {
	if err := s.open("Refund"); err != nil {
		return err
	}
	var key wireKey
	var limit wireLimit
	req := &ratelimitv1.RefundRequest{Key: key.set(a.Key), Limit: limit.set(a.Limit), Cost: a.Cost, At: a.At, Override: a.Override}
	err := s.conn.Invoke(ctx, ratelimitv1.StoreService_Refund_FullMethodName, req, new(ratelimitv1.RefundResponse), s.opts...)
	key.clear()
	if err != nil {
		return fromStatus("Refund", err)
	}
	return nil
}

// Reset forgets k's state under l on the server's store (see
// core.Store.Reset).
func (s *Store) Reset(ctx context.Context, k core.Key, l core.Limit) error {
	if err := s.open("Reset"); err != nil {
		return err
	}
	var key wireKey
	req := &ratelimitv1.StoreResetRequest{Key: key.set(k), Limit: newLimit(l)}
	err := s.conn.Invoke(ctx, ratelimitv1.StoreService_Reset_FullMethodName, req, new(ratelimitv1.StoreResetResponse), s.opts...)
	key.clear()
	if err != nil {
		return fromStatus("Reset", err)
	}
	return nil
}

// SetOverride sets k's override, or block, on the server's store (see
// core.Store.SetOverride), where every user of the service sees it.
func (s *Store) SetOverride(ctx context.Context, k core.Key, o core.Override) error {
	if err := s.open("SetOverride"); err != nil {
		return err
	}
	var key wireKey
	req := &ratelimitv1.SetOverrideRequest{Key: key.set(k)}
	if !o.Blocks() {
		req.Limit = newLimit(o.Limit)
	}
	if !o.Until.IsZero() {
		req.Until = timestamppb.New(o.Until)
	}
	err := s.conn.Invoke(ctx, ratelimitv1.StoreService_SetOverride_FullMethodName, req, new(ratelimitv1.SetOverrideResponse), s.opts...)
	key.clear()
	if err != nil {
		return fromStatus("SetOverride", err)
	}
	return nil
}

// ClearOverride ends k's override or block on the server's store (see
// core.Store.ClearOverride).
func (s *Store) ClearOverride(ctx context.Context, k core.Key) error {
	if err := s.open("ClearOverride"); err != nil {
		return err
	}
	var key wireKey
	req := &ratelimitv1.ClearOverrideRequest{Key: key.set(k)}
	err := s.conn.Invoke(ctx, ratelimitv1.StoreService_ClearOverride_FullMethodName, req, new(ratelimitv1.ClearOverrideResponse), s.opts...)
	key.clear()
	if err != nil {
		return fromStatus("ClearOverride", err)
	}
	return nil
}

// The interface every store implements.
var _ core.Store = (*Store)(nil)
