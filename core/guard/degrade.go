package guard

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/core"
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
		// At names no admission of the shared store: a refund of it gives
		// nothing back there
		res.Source, res.At = core.FromFallback, 0
		return nil
	}
	*res = core.Result{Allowed: true, Source: core.FailedOpen}
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
			out[i].Source, out[i].At = core.FromFallback, 0
		}
		return nil
	}
	for i := range out {
		out[i] = core.Result{Allowed: true, Source: core.FailedOpen}
	}
	return nil
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
