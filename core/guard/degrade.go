package guard

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/internal/cacheslot"
)

// degradeOne answers one op by the Mode, into res.
func (s *Store) degradeOne(ctx context.Context, op *core.Op, res *core.Result) error {
	s.degraded.Add(1)
	switch s.cfg.mode {
	case ModeClosed:
		*res = s.closed(op.Limit)
		return nil
	case ModeFallback:
		local := [1]core.Op{*op}
		local[0].Limit = s.divide(op.Limit)
		var out [1]core.Result
		if err := s.local.Take(ctx, local[:], out[:]); err != nil {
			return fmt.Errorf("guard: fallback: %w", err)
		}
		*res = out[0]
		s.fallback(op, res)
		return nil
	}
	*res = core.Result{Allowed: true, Source: core.FailedOpen, Capacity: op.Limit.Capacity()}
	return nil
}

// degradeAll answers a group by the Mode.
func (s *Store) degradeAll(ctx context.Context, ops []core.Op, out []core.Result) error {
	s.degraded.Add(1)
	switch s.cfg.mode {
	case ModeClosed:
		for i := range ops {
			out[i] = s.closed(ops[i].Limit)
		}
		return nil
	case ModeFallback:
		local := make([]core.Op, len(ops))
		for i, op := range ops {
			op.Limit = s.divide(op.Limit)
			local[i] = op
		}
		if err := s.local.Take(ctx, local, out); err != nil {
			return fmt.Errorf("guard: fallback: %w", err)
		}
		for i := range out {
			s.fallback(&ops[i], &out[i])
		}
		return nil
	}
	for i := range out {
		out[i] = core.Result{Allowed: true, Source: core.FailedOpen, Capacity: ops[i].Limit.Capacity()}
	}
	return nil
}

// fallback marks res, the local limiter's decision of op, as the fallback's:
// its At names no admission of the shared store (a refund of it gives
// nothing back there), and the limit it applied, unless an override's, is
// the local share of op's (Applied, when that is not op's own).
func (s *Store) fallback(op *core.Op, res *core.Result) {
	res.Source, res.At = core.FromFallback, 0
	if res.Applied == nil && s.cfg.instances > 1 {
		res.Applied = s.share(op.Limit)
	}
}

// shareSlots is the size of the cache of local shares (see share).
const shareSlots = 64

// shared is a limit and its local share.
type shared struct{ given, share core.Limit }

// share returns the local share of l (divide) as a value a Result may
// point to (Applied): from a small lock-free cache, so that a decision in
// fallback mode allocates nothing once its limit is cached.
func (s *Store) share(l core.Limit) *core.Limit {
	slot := &s.shares[cacheslot.Of(l, shareSlots)]
	if sh := slot.Load(); sh != nil && sh.given == l {
		return &sh.share
	}
	sh := &shared{given: l, share: s.divide(l)}
	slot.Store(sh)
	return &sh.share
}

// closed is the fail-closed denial of a key under l.
func (s *Store) closed(l core.Limit) core.Result {
	r := s.cfg.closedRetry
	return core.Result{
		Capacity:   l.Capacity(),
		RetryAfter: r,
		ResetAfter: r,
		State:      core.Throttled,
		Previous:   core.Throttled,
		Source:     core.FailedClosed,
	}
}

// divide returns the local share of l: Rate and Burst divided by the
// instances, rounded up so no limit falls to zero.
func (s *Store) divide(l core.Limit) core.Limit {
	n := s.cfg.instances
	if n <= 1 {
		return l
	}
	l.Rate = (l.Rate + n - 1) / n
	if l.Burst > 0 {
		l.Burst = (l.Burst + n - 1) / n
	}
	return l
}
