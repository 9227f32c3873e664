package guard

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/core"
)

// TakeEach decides each of takes as Take decides it: from the deny cache,
// from the backend, or by the Mode when the backend fails or the circuit
// of a node of the take is open. The takes the backend is to decide go to
// it in one TakeEach, bounded by the timeout as one call, when the backend
// is a core.EachTaker (the Redis store: one pipeline), and one after the
// other otherwise. Each take's circuits learn of its own outcome: a take
// whose call failed is answered by the Mode and counted as a failure, the
// others' answers stand.
func (s *Store) TakeEach(ctx context.Context, takes []core.Take) {
	et, ok := s.backend.(core.EachTaker)
	if !ok {
		for i := range takes {
			t := &takes[i]
			t.Err = s.Take(ctx, t.Ops, t.Out)
		}
		return
	}
	eb, _ := s.eachBufs.Get().(*eachBuf)
	if eb == nil {
		eb = new(eachBuf)
	}
	defer s.putEach(eb)
	passes := eb.passes(len(takes))
	sent, which := eb.sent[:0], eb.which[:0] // sent[k] is takes[which[k]]
	for i := range takes {
		t := &takes[i]
		if done, err := s.enterTake(ctx, t, &passes[i]); done {
			t.Err = err
			continue
		}
		sent = append(sent, core.Take{Ops: t.Ops, Out: t.Out})
		which = append(which, i)
	}
	eb.sent, eb.which = sent, which
	if len(sent) > 0 {
		s.calls.Add(uint64(len(sent)))
		cctx, cancel := s.bound(ctx)
		et.TakeEach(cctx, sent)
		cancel()
	}
	for k, i := range which {
		t, p := &takes[i], &passes[i]
		if len(t.Ops) == 1 {
			t.Err = s.leaveOne(ctx, t.Ops, t.Out, &p.one, sent[k].Err)
			continue
		}
		if err := sent[k].Err; err != nil {
			t.Err = s.groupFailed(ctx, err, t.Ops, t.Out, p.group.bs, p.group.probes)
			continue
		}
		s.leaveGroup(t.Ops, t.Out, &p.group)
		t.Err = nil
	}
}

// takePass is what one take of a TakeEach passed through, as a take of
// one op or of several.
type takePass struct {
	one   onePass
	group groupPass
}

// eachBuf holds the arrays of one TakeEach, pooled: what each take passed
// through, the takes sent to the backend and which take each is.
type eachBuf struct {
	pass  []takePass
	sent  []core.Take
	which []int
}

// passes returns n zero takePasses.
func (eb *eachBuf) passes(n int) []takePass {
	if cap(eb.pass) < n {
		eb.pass = make([]takePass, n)
	}
	return eb.pass[:n]
}

// putEach returns eb to the pool, keeping neither circuits nor ops.
func (s *Store) putEach(eb *eachBuf) {
	clear(eb.pass)
	clear(eb.sent)
	eb.pass, eb.sent, eb.which = eb.pass[:0], eb.sent[:0], eb.which[:0]
	s.eachBufs.Put(eb)
}

// enterTake answers t without the backend (done, and its error) when Take
// would, or lets it through, noted in p.
func (s *Store) enterTake(ctx context.Context, t *core.Take, p *takePass) (done bool, err error) {
	switch {
	case len(t.Out) != len(t.Ops):
		return true, fmt.Errorf("guard: Take: %d results for %d ops", len(t.Out), len(t.Ops))
	case len(t.Ops) == 0:
		return true, nil
	case len(t.Ops) == 1:
		return s.enterOne(ctx, t.Ops, t.Out, &p.one)
	}
	return s.enterGroup(ctx, t.Ops, t.Out, &p.group)
}

var _ core.EachTaker = (*Store)(nil)
