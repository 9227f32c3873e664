package lease

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/core"
)

// Refund gives back the admission a (see core.Store.Refund). An admission
// of a policy that is not leased (a.Lease zero), or made under an
// override, is given back by the store below. A leased window's admission
// goes back to this Store's block when it came from it and the block is
// still live (its units are spent again in the same window), and to the
// store below otherwise, which gives it back while its window lasts. A
// leased bucket's admission gives back nothing: returning units to a
// bucket lowers it under every block taken after the admission, which
// other instances may be spending from, and those would then admit more
// than the limit (see the package documentation).
func (s *Store) Refund(ctx context.Context, a core.Admission) error {
	if err := s.open("Refund"); err != nil {
		return err
	}
	if a.Lease <= 0 || a.Override != 0 || a.Cost <= 0 || a.Key.Identity == "" ||
		a.Limit.Algorithm == core.SlidingWindowLog {
		return s.inner.Refund(ctx, a)
	}
	if err := a.Limit.Validate(); err != nil {
		return fmt.Errorf("lease: Refund: %w", err)
	}
	if a.Limit.Algorithm.Bucket() {
		s.stats.refundsDropped.Add(1)
		return nil
	}
	if s.returnToBlock(a) {
		return nil
	}
	return s.inner.Refund(ctx, a)
}

// returnToBlock puts a's units back in the live block of a's key that
// admitted them, and reports whether it did.
func (s *Store) returnToBlock(a core.Admission) bool {
	e := s.find(a.Key)
	if e == nil {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	now := s.clockOf(e)
	b := &e.blk
	if e.lim != a.Limit || b.n == 0 || now >= b.end || a.At < b.at || a.At >= b.at+(b.end-b.recv) || b.left+a.Cost > b.n {
		return false
	}
	b.left += a.Cost
	return true
}
