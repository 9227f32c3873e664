package redisstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/storekit"
)

// TakeEach decides each of takes as Take decides it, in one pipeline to
// each server where Take would wait for one answer per take: the takes of
// one op are decide1 calls queued together (on a standalone server, one
// decideMany call decides them), bounded by the store's timeout as one
// call; every other take (of several ops, or a booking) is decided by
// Take on a goroutine of its own, so that its calls join the same
// pipelines.
func (s *Store) TakeEach(ctx context.Context, takes []core.Take) {
	var wg sync.WaitGroup
	eb, _ := s.eachBufs.Get().(*eachBuf)
	if eb == nil {
		eb = new(eachBuf)
	}
	defer s.putEach(eb)
	calls, which, cps := eb.calls[:0], eb.which[:0], eb.cps[:0] // calls[k] decides takes[which[k]]
	deadline := time.Now().Add(s.timeout)
	for i := range takes {
		t := &takes[i]
		t.Err = nil
		switch {
		case len(t.Out) != len(t.Ops):
			t.Err = fmt.Errorf("redisstore: Take: %d results for %d ops", len(t.Out), len(t.Ops))
		case len(t.Ops) == 0:
		case len(t.Ops) == 1 && t.Ops[0].MaxDelay == 0:
			op := &t.Ops[0]
			cp, err := s.prepare(op.Key, op.Limit, op.Cost)
			if err != nil {
				t.Err = fmt.Errorf("redisstore: Take: %w", storekit.FieldIn("ops[0]", err))
				continue
			}
			c := s.newCall1(deadline)
			s.decide1Argv(c, cp, op)
			calls, which, cps = append(calls, c), append(which, i), append(cps, cp)
		default:
			wg.Add(1)
			go func() {
				defer wg.Done()
				t.Err = s.Take(ctx, t.Ops, t.Out)
			}()
		}
	}
	eb.calls, eb.which, eb.cps = calls, which, cps
	if len(calls) > 0 {
		errs := s.runEachInto(ctx, calls, eb.errors(len(calls)))
		for k, c := range calls {
			s.answer(c, cps[k], errs[k], &takes[which[k]])
		}
	}
	wg.Wait()
}

// eachBuf holds the arrays of one TakeEach, pooled: its calls, the take
// of each, their limits compiled and their errors.
type eachBuf struct {
	calls []*call
	which []int
	cps   []*compiled
	errs  []error
}

// errors returns room for n errors.
func (eb *eachBuf) errors(n int) []error {
	if cap(eb.errs) < n {
		eb.errs = make([]error, n)
	}
	return eb.errs[:n]
}

// putEach returns eb to the pool, keeping no call and no error.
func (s *Store) putEach(eb *eachBuf) {
	clear(eb.calls)
	clear(eb.errs)
	eb.calls, eb.which, eb.cps, eb.errs = eb.calls[:0], eb.which[:0], eb.cps[:0], eb.errs[:0]
	s.eachBufs.Put(eb)
}

// answer writes the answer of c, a decide1 call of the limit compiled cp
// that returned err, to t, and returns c to its pool.
func (s *Store) answer(c *call, cp *compiled, err error, t *core.Take) {
	var d decided
	if err == nil {
		err = s.decode(c.res, cp, &d)
	}
	s.putCall1(c)
	if err != nil {
		t.Err = err
		return
	}
	t.Out[0] = d.result()
}

var _ core.EachTaker = (*Store)(nil)
