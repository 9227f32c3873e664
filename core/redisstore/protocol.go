package redisstore

import (
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/algo"
	"github.com/sluicehq/sluice/lua"
)

// decided is one op's reply: its outcome under the limit that applied.
type decided struct {
	o          algo.Outcome
	cp         *compiled // the limit applied: the op's, or an override's
	overridden bool
	ovID       uint64 // the override's id (0: none, or written without one)
	blocked    bool
	blockUs    int64
}

func (d *decided) result() core.Result {
	if d.blocked {
		wait := time.Duration(d.blockUs) * time.Microsecond
		return core.Result{Limit: d.cp.sp.Capacity, RetryAfter: wait, ResetAfter: wait, State: core.Throttled, Previous: core.Throttled, At: d.o.At}
	}
	res := d.cp.sp.Result(&d.o)
	if d.overridden { // the override's limit, which the Result describes
		res.Applied, res.Override = &d.cp.sp.Limit, d.ovID
	}
	return res
}

// opReply is the length of one op's reply of lua/decide.lua when an
// override applies (and of each op's in a group).
const opReply = 13

// decode reads one op's reply (see lua/decide.lua): 13 integers, or 7 when
// no override applies.
func (s *Store) decode(res []int64, cp *compiled, d *decided) error {
	if len(res) != opReply && len(res) != 7 {
		return fmt.Errorf("redisstore: unexpected script reply %v", res)
	}
	d.cp = cp
	if len(res) == 7 {
		if err := outcome(res, &d.o); err != nil {
			return fmt.Errorf("redisstore: %w", err)
		}
		return nil
	}
	switch res[7] {
	case 2:
		d.blocked, d.blockUs = true, res[2]
		d.o = algo.Outcome{Retry: res[2], Reset: res[3], Level: core.Throttled, Prev: core.Throttled, At: res[6]}
		return nil
	case 1:
		ol := core.Limit{Algorithm: core.Algorithm(res[8]), Rate: res[9], Period: time.Duration(res[10]) * time.Microsecond, Burst: res[11]}
		ocp, err := s.compile(ol)
		if err != nil {
			return fmt.Errorf("redisstore: override: %w", err)
		}
		d.cp, d.overridden, d.ovID = ocp, true, uint64(max(res[12], 0))
	}
	if err := outcome(res[:7], &d.o); err != nil {
		return fmt.Errorf("redisstore: %w", err)
	}
	return nil
}

// refundArgs appends ARGV of a refund of one op (lua/refund.lua): the
// instant, one op, the level to restore ("-1": follow the lower usage), the
// limit, the cost, the instant of the admission refunded, after: -1 for an
// admission named by its instant only, or the reset of the decision just
// received that is being undone, and the id of the override the admission
// was made under (0: none).
func (s *Store) refundArgs(args []any, cp *compiled, level string, cost, at, after int64, ovID uint64) []any {
	return append(args, s.now(), 1, level, cp.boxed, cost, at, after, strconv.FormatUint(ovID, 10))
}

// scriptLimit returns the algorithm code and the six parameters of a limit,
// separated by spaces, as lua/decide.lua reads them.
func scriptLimit(sp *algo.Spec) string {
	var code string
	var n [6]int64
	switch sp.Algorithm {
	case core.FixedWindow:
		code, n = lua.CodeFixed, [6]int64{sp.Period, sp.Limit.Rate, sp.WarnAbove, sp.ClearBelow}
	case core.SlidingWindowLog:
		code, n = lua.CodeLog, [6]int64{sp.Period, sp.Limit.Rate, sp.WarnAbove, sp.ClearBelow}
	case core.SlidingWindowCounter:
		code, n = lua.CodeCounter, [6]int64{sp.Period, sp.Limit.Rate, sp.Full, sp.WarnAbove, sp.ClearBelow}
	default:
		code, n = lua.CodeBucket, [6]int64{sp.Q, sp.T, sp.Full, sp.Capacity, sp.WarnAbove, sp.ClearBelow}
	}
	b := []byte(code)
	for _, v := range n {
		b = strconv.AppendInt(append(b, ' '), v, 10)
	}
	return string(b)
}

// now is ARGV[1] of every script: the instant in µs, or -1 for Redis TIME.
func (s *Store) now() any {
	if s.clock != nil {
		return s.clock().UnixMicro()
	}
	return "-1" // a constant: boxing it allocates nothing
}

// args appends ARGV of decide (lua/decide.lua):
// the instant, the number of ops, and for each op shadow, limit and cost.
func (s *Store) args(args []any, cps []*compiled, ops []core.Op) []any {
	args = append(args, s.now(), len(ops))
	for i, op := range ops {
		shadow := any("0") // a constant: boxing it allocates nothing
		if op.Shadow {
			shadow = any("1")
		}
		args = append(args, shadow, cps[i].boxed, op.Cost)
	}
	return args
}

// outcome decodes one op's reply {allowed, remaining, retry, reset, level,
// previous level, instant}.
func outcome(res []int64, o *algo.Outcome) error {
	if len(res) != 7 || res[4] < 0 || res[4] > 2 || res[5] < 0 || res[5] > 2 {
		return fmt.Errorf("unexpected script reply %v", res)
	}
	*o = algo.Outcome{Allowed: res[0] == 1, Remaining: res[1], Retry: res[2], Reset: res[3], Level: core.State(res[4]), Prev: core.State(res[5]), At: res[6]}
	return nil
}
