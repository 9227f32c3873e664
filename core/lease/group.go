package lease

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/storekit"
)

// takeGroup decides a Take of several ops, some leased, all or nothing:
// a leased op denied by a denial this Store repeats denies the group
// before the store is asked; otherwise the store below decides the ops
// that are not leased, in one Take, and then each leased op is decided
// as alone (from its block, or by a block take). When a leased op is
// denied after the store admitted the others, their admissions are given
// back (exactly: they are of policies no instance leases), as are the
// leased ones' (a window's to its block; a bucket's units are lost, as
// any bucket refund under a lease).
func (s *Store) takeGroup(ctx context.Context, ops []core.Op, out []core.Result) error {
	if err := storekit.ValidateGroup(ops); err != nil {
		return fmt.Errorf("lease: Take: %w", err)
	}
	for i := range ops {
		if err := validate(&ops[i]); err != nil {
			return fmt.Errorf("lease: Take: op %d: %w", i, err)
		}
	}
	if i := s.cachedDenial(ops, out); i >= 0 {
		return s.peekRest(ctx, ops, out, func(j int) bool { return j == i })
	}
	var sub []core.Op
	var where []int
	for i := range ops {
		if !leased(&ops[i]) {
			sub, where = append(sub, ops[i]), append(where, i)
		}
	}
	if len(sub) > 0 {
		res := make([]core.Result, len(sub))
		if err := s.inner.Take(ctx, sub, res); err != nil {
			return err
		}
		for k, i := range where {
			out[i] = res[k]
		}
		if refused(sub, res) {
			return s.peekRest(ctx, ops, out, func(j int) bool { return !leased(&ops[j]) })
		}
	}
	return s.takeLeased(ctx, ops, out)
}

// takeLeased decides the leased ops of a group whose other ops the store
// has admitted; on a denial it gives every admission back.
func (s *Store) takeLeased(ctx context.Context, ops []core.Op, out []core.Result) error {
	for i := range ops {
		op := &ops[i]
		if !leased(op) {
			continue
		}
		if err := s.takeOne(ctx, op, &out[i]); err != nil {
			return errors.Join(err, s.giveAllBack(ctx, ops, out, i))
		}
		if op.Cost > 0 && !op.Shadow && !out[i].Allowed {
			if err := s.giveAllBack(ctx, ops, out, i); err != nil {
				return err
			}
			return s.peekRest(ctx, ops, out, func(j int) bool { return j <= i })
		}
	}
	return nil
}

// cachedDenial returns the index of a leased op that is not a shadow and
// that this Store denies from a denial it repeats (its Result in out), or
// -1.
func (s *Store) cachedDenial(ops []core.Op, out []core.Result) int {
	for i := range ops {
		op := &ops[i]
		if !leased(op) || op.Cost == 0 || op.Shadow {
			continue
		}
		e := s.find(op.Key)
		if e == nil {
			continue
		}
		e.mu.Lock()
		hit := e.lim == op.Limit && e.denied(s.clockOf(e), op.Cost, &out[i])
		e.mu.Unlock()
		if hit {
			s.stats.denied.Add(1)
			return i
		}
	}
	return -1
}

// refused reports whether the store denied an op of ops that is not a
// shadow its cost.
func refused(ops []core.Op, res []core.Result) bool {
	for k := range ops {
		if ops[k].Cost > 0 && !ops[k].Shadow && !res[k].Allowed {
			return true
		}
	}
	return false
}

// peekRest fills the Results of a denied group's ops that done does not
// name with what each would be told now, consuming nothing.
func (s *Store) peekRest(ctx context.Context, ops []core.Op, out []core.Result, done func(int) bool) error {
	for j := range ops {
		if done(j) {
			continue
		}
		peek := ops[j]
		peek.Cost = 0
		if err := s.Take(ctx, []core.Op{peek}, out[j:j+1]); err != nil {
			return err
		}
	}
	return nil
}

// giveAllBack gives back the admissions of ops (their Results in out):
// those the store below made, and those of the leased ops before upto.
func (s *Store) giveAllBack(ctx context.Context, ops []core.Op, out []core.Result, upto int) error {
	var errs []error
	for j := range ops {
		op, r := &ops[j], &out[j]
		if leased(op) && j >= upto || op.Cost == 0 || !r.Allowed || r.Source.Degraded() || r.Applied != nil && r.Override == 0 {
			continue
		}
		a := core.Admission{Key: op.Key, Limit: op.Limit, Cost: op.Cost, At: r.At, Override: r.Override, Lease: op.Lease}
		if r.Applied != nil {
			a.Limit = *r.Applied
		}
		if !leased(op) {
			a.Lease = 0
		}
		if err := s.Refund(ctx, a); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// validate reports why op cannot be decided, as the stores word it.
func validate(op *core.Op) error {
	switch {
	case op.Key.Identity == "":
		return fmt.Errorf("Key: %w", core.ErrNoKey)
	case op.Cost < 0:
		return fmt.Errorf("Cost: %w: %d", core.ErrInvalidCost, op.Cost)
	}
	return op.Limit.Validate()
}
