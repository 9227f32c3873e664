package guard

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/core"
)

// degradeOne answers one key by the Mode.
func (s *Store) degradeOne(ctx context.Context, k *keyParts, l core.Limit, cost int64) (core.Result, error) {
	s.degraded.Add(1)
	switch s.cfg.mode {
	case ModeClosed:
		return s.closed(l), nil
	case ModeFallback:
		var res core.Result
		var err error
		if !k.whole {
			res, err = s.local.TakeSplit(ctx, k.id, k.policy, s.divide(l), cost)
		} else {
			res, err = s.local.Take(ctx, k.joined, s.divide(l), cost)
		}
		if err != nil {
			return core.Result{}, fmt.Errorf("guard: fallback: %w", err)
		}
		// At names no admission of the shared store: a refund of it gives
		// nothing back there
		res.Source, res.At = core.FromFallback, 0
		return res, nil
	}
	return core.Result{Allowed: true, Source: core.FailedOpen}, nil
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
		if err := s.local.TakeAll(ctx, local, out); err != nil {
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
