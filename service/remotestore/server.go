package remotestore

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/storekit"
	"github.com/sluicehq/sluice/service/ratelimitv1"
)

// MaxOps bounds the ops of one Take: a larger request is INVALID_ARGUMENT
// (core.ErrInvalidCost naming the field ops). A Take is one request's
// policies; this is far above any real one.
const MaxOps = 1024

// Server answers sluice.ratelimit.v1.StoreService on a core.Store: every
// RPC is one call of the store, so its decisions are the store's own
// (ratelimitd passes its memory or Redis store, guarded or not).
//
// Every Key a client sends is decided in the store API's own namespace
// (see PolicyPrefix and ServerKey), apart from every other key of the
// server's store. Reset, SetOverride and ClearOverride are admin changes:
// with WithRecorder each one runs through the Recorder (ratelimitd's
// writes its audit row), and is refused when it cannot be recorded. Take,
// TakeBatch and Refund are decisions, not changes: they are not recorded.
type Server struct {
	ratelimitv1.UnimplementedStoreServiceServer
	store  core.Store
	log    *slog.Logger
	record Recorder
}

// ServerOption configures a Server.
type ServerOption func(*Server)

// WithLogger sets the logger of store failures (the default is
// slog.Default()): their text is logged there and never sent to a client.
func WithLogger(l *slog.Logger) ServerOption {
	return func(s *Server) {
		if l != nil {
			s.log = l
		}
	}
}

// WithRecorder makes every admin change (Reset, SetOverride,
// ClearOverride) run through r (the default applies it as it is).
func WithRecorder(r Recorder) ServerOption {
	return func(s *Server) {
		if r != nil {
			s.record = r
		}
	}
}

// NewServer returns a Server deciding on store.
func NewServer(store core.Store, opts ...ServerOption) *Server {
	s := &Server{store: store, log: slog.Default(), record: applyOnly}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Register registers s on a gRPC server (a *grpc.Server).
func (s *Server) Register(r grpc.ServiceRegistrar) {
	ratelimitv1.RegisterStoreServiceServer(r, s)
}

// takeOne is everything a Take of one op needs, in one allocation.
type takeOne struct {
	resp ratelimitv1.TakeResponse
	ptrs [1]*ratelimitv1.StoreResult
	res  [1]wireResult
	ops  [1]core.Op
	out  [1]core.Result
	keys [64]byte // the op's namespaced policy, when it fits
}

// Take decides the request's ops all or nothing on the store.
func (s *Server) Take(ctx context.Context, req *ratelimitv1.TakeRequest) (*ratelimitv1.TakeResponse, error) {
	resp, err := s.take(ctx, req)
	if err != nil {
		return nil, toStatus(ctx, s.log, "Take", err)
	}
	return resp, nil
}

// take decides one Take; its error is the store's (or a conversion's).
func (s *Server) take(ctx context.Context, req *ratelimitv1.TakeRequest) (*ratelimitv1.TakeResponse, error) {
	n := len(req.Ops)
	if n > MaxOps {
		return nil, opError(-1, "ops", core.ErrInvalidCost, "at most %d ops in one Take, got %d", MaxOps, n)
	}
	var (
		resp *ratelimitv1.TakeResponse
		ptrs []*ratelimitv1.StoreResult
		res  []wireResult
		ops  []core.Op
		out  []core.Result
		keys []byte
	)
	if n == 1 {
		one := new(takeOne)
		resp, ptrs, res, ops, out, keys = &one.resp, one.ptrs[:], one.res[:], one.ops[:], one.out[:], one.keys[:0]
	} else {
		resp = new(ratelimitv1.TakeResponse)
		ptrs = make([]*ratelimitv1.StoreResult, n)
		res = make([]wireResult, n)
		ops = make([]core.Op, n)
		out = make([]core.Result, n)
		size := 0
		for _, p := range req.Ops {
			size += len(PolicyPrefix) + len(p.GetKey().GetPolicy())
		}
		keys = make([]byte, 0, size)
	}
	for i, p := range req.Ops {
		if p == nil {
			return nil, opError(i, "Key", core.ErrNoKey, "the op is missing")
		}
		l, err := limitOf(p.Limit, i, "Limit")
		if err != nil {
			return nil, err
		}
		maxDelay, ok := duration(p.MaxDelay)
		if !ok {
			return nil, opError(i, "MaxDelay", core.ErrInvalidCost, "not a valid duration")
		}
		var k core.Key
		k, keys = keyOf(keys, p.Key)
		ops[i] = core.Op{Key: k, Limit: l, Cost: p.Cost, Shadow: p.Shadow, MaxDelay: maxDelay}
	}
	if err := s.store.Take(ctx, ops, out); err != nil {
		return nil, err
	}
	for i := range out {
		ptrs[i] = res[i].set(&out[i])
	}
	resp.Results = ptrs
	return resp, nil
}

// MaxBatch bounds the Takes of one TakeBatch: a larger request is
// INVALID_ARGUMENT (core.ErrInvalidCost naming the field takes).
const MaxBatch = 4096

// TakeBatch decides each Take of the request on its own, concurrently (so
// the Redis store pipelines them), and answers every one's outcome.
func (s *Server) TakeBatch(ctx context.Context, req *ratelimitv1.TakeBatchRequest) (*ratelimitv1.TakeBatchResponse, error) {
	n := len(req.Takes)
	if n > MaxBatch {
		return nil, toStatus(ctx, s.log, "TakeBatch", opError(-1, "takes", core.ErrInvalidCost, "at most %d Takes in one batch, got %d", MaxBatch, n))
	}
	outcomes := make([]ratelimitv1.TakeOutcome, n)
	resp := &ratelimitv1.TakeBatchResponse{Outcomes: make([]*ratelimitv1.TakeOutcome, n)}
	decide := func(i int) {
		o := &outcomes[i]
		r, err := s.take(ctx, req.Takes[i])
		if err != nil {
			o.Error = toWire(ctx, s.log, err)
		} else {
			o.Results = r.Results
		}
		resp.Outcomes[i] = o
	}
	var wg sync.WaitGroup
	for i := 1; i < n; i++ {
		wg.Go(func() { decide(i) })
	}
	if n > 0 {
		decide(0)
	}
	wg.Wait()
	return resp, nil
}

// Refund gives back one admission on the store.
func (s *Server) Refund(ctx context.Context, req *ratelimitv1.RefundRequest) (*ratelimitv1.RefundResponse, error) {
	l, err := limitOf(req.Limit, -1, "Limit")
	if err != nil {
		return nil, toStatus(ctx, s.log, "Refund", err)
	}
	var buf [64]byte
	k, _ := keyOf(buf[:0], req.Key)
	a := core.Admission{Key: k, Limit: l, Cost: req.Cost, At: req.At, Override: req.Override}
	if err := s.store.Refund(ctx, a); err != nil {
		return nil, toStatus(ctx, s.log, "Refund", err)
	}
	return &ratelimitv1.RefundResponse{}, nil
}

// Reset forgets one key's state on the store: an admin change (see
// Recorder).
func (s *Server) Reset(ctx context.Context, req *ratelimitv1.StoreResetRequest) (*ratelimitv1.StoreResetResponse, error) {
	l, err := limitOf(req.Limit, -1, "Limit")
	if err == nil {
		err = validKey(req.Key)
	}
	if err == nil {
		err = l.Validate()
	}
	if err != nil {
		return nil, toStatus(ctx, s.log, "Reset", err)
	}
	var buf [64]byte
	k, _ := keyOf(buf[:0], req.Key)
	c := newChange(ActionReset, req.Key, &auditReset{Limit: auditLimitOf(&l)}, nil)
	if err := s.change(ctx, "Reset", c, func(ctx context.Context) error { return s.store.Reset(ctx, k, l) }); err != nil {
		return nil, err
	}
	return &ratelimitv1.StoreResetResponse{}, nil
}

// SetOverride sets one key's override or block on the store: an admin
// change (see Recorder).
func (s *Server) SetOverride(ctx context.Context, req *ratelimitv1.SetOverrideRequest) (*ratelimitv1.SetOverrideResponse, error) {
	o, err := overrideOf(req)
	if err == nil {
		err = validKey(req.Key)
	}
	if err == nil {
		err = storekit.ValidateOverride(o, time.Now())
	}
	if err != nil {
		return nil, toStatus(ctx, s.log, "SetOverride", err)
	}
	var buf [64]byte
	k, _ := keyOf(buf[:0], req.Key)
	after := &auditOverride{Block: o.Blocks(), Until: o.Until.UTC()}
	if !o.Blocks() {
		after.Limit = auditLimitOf(&o.Limit)
	}
	c := newChange(ActionOverrideSet, req.Key, after, nil)
	if err := s.change(ctx, "SetOverride", c, func(ctx context.Context) error { return s.store.SetOverride(ctx, k, o) }); err != nil {
		return nil, err
	}
	return &ratelimitv1.SetOverrideResponse{}, nil
}

// overrideOf reads the override of req.
func overrideOf(req *ratelimitv1.SetOverrideRequest) (core.Override, error) {
	l, err := limitOf(req.Limit, -1, "Limit")
	if err != nil {
		return core.Override{}, err
	}
	o := core.Override{Limit: l}
	if req.Until != nil {
		if err := req.Until.CheckValid(); err != nil {
			return core.Override{}, opError(-1, "Until", core.ErrInvalidLimit, "%v", err)
		}
		o.Until = req.Until.AsTime()
	}
	return o, nil
}

// ClearOverride ends one key's override on the store: an admin change
// (see Recorder).
func (s *Server) ClearOverride(ctx context.Context, req *ratelimitv1.ClearOverrideRequest) (*ratelimitv1.ClearOverrideResponse, error) {
	if err := validKey(req.Key); err != nil {
		return nil, toStatus(ctx, s.log, "ClearOverride", err)
	}
	var buf [64]byte
	k, _ := keyOf(buf[:0], req.Key)
	c := newChange(ActionOverrideClear, req.Key, nil, nil)
	if err := s.change(ctx, "ClearOverride", c, func(ctx context.Context) error { return s.store.ClearOverride(ctx, k) }); err != nil {
		return nil, err
	}
	return &ratelimitv1.ClearOverrideResponse{}, nil
}

// validKey reports a key without identity (core.ErrNoKey), as the store
// would, before anything is recorded.
func validKey(p *ratelimitv1.StoreKey) error {
	if len(p.GetIdentity()) == 0 {
		return opError(-1, "Key.Identity", core.ErrNoKey, "required")
	}
	return nil
}

// change runs apply through the Recorder and returns the status to
// answer: the store's error as the store's (bad input or UNAVAILABLE), a
// failure to record as UNAVAILABLE (logged; nothing of it is sent).
func (s *Server) change(ctx context.Context, method string, c Change, apply func(context.Context) error) error {
	var applied error
	err := s.record(ctx, c, func(ctx context.Context) error {
		applied = apply(ctx)
		return applied
	})
	switch {
	case applied != nil:
		return toStatus(ctx, s.log, method, applied)
	case err != nil:
		if cerr := ctx.Err(); cerr != nil {
			return status.FromContextError(cerr).Err()
		}
		s.log.LogAttrs(ctx, slog.LevelError, "remotestore: recording an admin change failed", slog.String("method", method),
			slog.String("action", c.Action), slog.String("target", c.Target), slog.Any("error", err))
		return status.Error(codes.Unavailable, unrecordedMessage)
	}
	return nil
}
