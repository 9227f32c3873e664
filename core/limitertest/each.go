package limitertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
)

// testEach checks, for a store that is a core.EachTaker, that TakeEach
// decides every take as Take decides it alone: random takes (one op of any
// cost, groups across identities and policies, some denied, shadows,
// bookings, and invalid ones: a bad limit, a negative cost, two ops of one
// Key, too few results) on distinct keys, each compared with the same take
// by Take on a twin of its keys, over rounds on one clock in which the
// keys and their twins live the same histories.
func testEach(t *testing.T, newStore Factory) {
	for _, a := range Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			clock := NewClock()
			s := newStore(t, clock.Now)
			et, ok := s.(core.EachTaker)
			if !ok {
				t.Fatalf("%T is not a core.EachTaker", s)
			}
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(uint64(a), 21))
			base := Key(t).Identity
			for round := range 4 {
				var each, alone []core.Take
				for i := range 24 {
					ops, out := eachTake(rng, core.PerSecond(int64(2+i%4)).WithAlgorithm(a), fmt.Sprintf("%s-%d", base, i))
					twin := make([]core.Op, len(ops))
					for j, op := range ops {
						op.Key.Identity += "-twin"
						twin[j] = op
					}
					each = append(each, core.Take{Ops: ops, Out: out})
					alone = append(alone, core.Take{Ops: twin, Out: make([]core.Result, len(out))})
				}
				et.TakeEach(ctx, each)
				for i := range alone {
					alone[i].Err = s.Take(ctx, alone[i].Ops, alone[i].Out)
					where := fmt.Sprintf("round %d take %d %+v", round, i, each[i].Ops)
					if (each[i].Err == nil) != (alone[i].Err == nil) ||
						errors.Is(each[i].Err, core.ErrInvalidCost) != errors.Is(alone[i].Err, core.ErrInvalidCost) ||
						errors.Is(each[i].Err, core.ErrInvalidLimit) != errors.Is(alone[i].Err, core.ErrInvalidLimit) {
						t.Fatalf("%s: TakeEach's error %v, Take's %v", where, each[i].Err, alone[i].Err)
					}
					if each[i].Err != nil {
						continue
					}
					for j := range each[i].Out {
						if got, want := each[i].Out[j], alone[i].Out[j]; got != want {
							t.Fatalf("%s: op %d: TakeEach %+v, Take %+v", where, j, got, want)
						}
					}
				}
				clock.Advance(time.Duration(rng.IntN(1500)) * time.Millisecond)
			}
		})
	}
}

// eachTake returns a random take of testEach under l on keys named after
// id, and the memory of its results (too little, now and then).
func eachTake(rng *rand.Rand, l core.Limit, id string) ([]core.Op, []core.Result) {
	op := func(identity, policy string) core.Op {
		return core.Op{Key: core.Key{Identity: identity, Policy: policy}, Limit: l, Cost: int64(rng.IntN(4))}
	}
	var ops []core.Op
	switch rng.IntN(8) {
	case 0, 1, 2:
		ops = []core.Op{op(id, "p")}
	case 3:
		ops = []core.Op{op(id, "p"), op(id, "q"), op(id+"-b", "p")}
		ops[rng.IntN(3)].Shadow = true
	case 4:
		o := op(id, "p")
		o.MaxDelay = time.Duration(rng.IntN(3)) * time.Second
		ops = []core.Op{o}
	case 5:
		ops = []core.Op{op(id, "p"), op(id, "p")} // two ops of one Key
	case 6:
		o := op(id, "p")
		if rng.IntN(2) == 0 {
			o.Cost = -1
		} else {
			o.Limit.Rate = 0
		}
		ops = []core.Op{o}
	default:
		ops = []core.Op{op(id, "p"), op(id+"-b", "p")}
	}
	out := make([]core.Result, len(ops))
	if rng.IntN(16) == 0 {
		out = out[:len(out)-1]
	}
	return ops, out
}
