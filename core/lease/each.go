package lease

import (
	"context"

	"github.com/sluicehq/sluice/core"
)

// TakeEach decides each of takes as Take decides it alone (see
// core.EachTaker). The takes without a leased op go to the store below in
// one TakeEach when it is a core.EachTaker (one round trip for a batch on
// Redis), as they would go one by one through Take; those with a leased op
// are decided by Take, from their blocks.
func (s *Store) TakeEach(ctx context.Context, takes []core.Take) {
	if err := s.open("TakeEach"); err != nil {
		for i := range takes {
			takes[i].Err = err
		}
		return
	}
	et, ok := s.inner.(core.EachTaker)
	n := 0
	for i := range takes {
		if !anyLeased(takes[i].Ops) {
			n++
		}
	}
	if !ok || n == 0 {
		for i := range takes {
			t := &takes[i]
			t.Err = s.Take(ctx, t.Ops, t.Out)
		}
		return
	}
	s.stats.passed.Add(uint64(n))
	if n == len(takes) {
		et.TakeEach(ctx, takes)
		return
	}
	s.takeMixed(ctx, et, takes, n)
}

// takeMixed decides takes of which n have no leased op: those n in one
// TakeEach of et, the others by Take.
func (s *Store) takeMixed(ctx context.Context, et core.EachTaker, takes []core.Take, n int) {
	pass, of := make([]core.Take, 0, n), make([]int, 0, n)
	for i := range takes {
		t := &takes[i]
		if anyLeased(t.Ops) {
			t.Err = s.Take(ctx, t.Ops, t.Out)
			continue
		}
		pass, of = append(pass, core.Take{Ops: t.Ops, Out: t.Out}), append(of, i)
	}
	et.TakeEach(ctx, pass)
	for k := range pass {
		takes[of[k]].Err = pass[k].Err
	}
}
