package redisstore

import (
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/algo"
	"github.com/sluicehq/sluice/lua"
)

// The script protocol: how Go calls the entry points of package lua and
// reads their replies. Every offset below is named once here (Go) and once at
// the top of lua/decide.lua (Lua, 1-based); both sides cite this table.
//
//	call.argv       [0] command (fcall, evalsha, eval)  [1] function or script
//	                [2] number of keys                   [3...] KEYS, then ARGV
//
//	decide1 (one op)        KEYS: state, override, override state   (keysPerOp)
//	                        ARGV: instant, limit, cost              (decide1Args)
//	                              [, booking: the longest, µs]      (a booking)
//	decide (n ops, all or   KEYS: n times keysPerOp
//	nothing)                ARGV: instant, n (argvHead), then per op:
//	                              shadow, limit, cost               (argsPerOp)
//	                              [, "1": undoable; see undoLen]    (a group's part)
//	decideMany (n ops,      KEYS: n times manyKeysPerOp: state, override
//	each as decide1, at     ARGV: instant, L (manyHead), the L distinct
//	one instant; on a             limits, then per op its cost (L = 1),
//	standalone server)            or its limit's index (1-based) and
//	                              its cost (L > 1); or 0 (for L), the
//	                              limit and the cost every op has
//	refund (n ops)          KEYS: per op state, override            (refundKeysPerOp)
//	                        ARGV: instant, n (argvHead), then per op:
//	                              state to restore, limit, cost, at,
//	                              after, override id                (refundArgsPerOp)
//
//	instant: µs, or -1 for Redis TIME. limit: see scriptLimit. state: a
//	core.State, or -1 to follow the lower usage. at: the replyAt of the
//	admission. after: -1 (the admission is named by its instant only), the
//	replyReset of the decision being undone, or "u", the undoLen integers
//	of its undoable reply and that reset (see decided.undoArg). override id: the replyOverrideID
//	of the admission, 0 for none.
//
//	booking: decide1 only (Store.book; never grouped into decideMany), at
//	most 2^53 (the script cuts it to the algo.Spec.MaxDelay of the limit
//	applied, the op's or an override's); 0 or absent: a take.
//
//	reply of one op   [0] allowed (0/1)   [1] remaining   [2] retry   [3] reset
//	(each op of       [4] state   [5] previous state   [6] at (the instant it was
//	decide)           decided at, µs)      [7] override (overrideNone,
//	                  overrideLimit, overrideBlock)
//	                  [8] algorithm  [9] rate  [10] period (µs)  [11] burst of
//	                  the override's limit   [12] override id
//	                  [13] µs the override has left  [14] allowed (-1: not
//	                  peeked)  [15] retry  [16] reset of the key's own state
//	                  at the override's end (see decided.handover): opReply
//	                  integers (zeros from [7] when no override applies), and
//	                  opReply+undoLen when undoable.
//	                  An admitted booking's retry is the wait until its slot
//	                  (in units) and its at the slot.
//	                  A block's retry and reset are in µs.
//	short reply       [0] flags: allowed + 2*state + 8*previous state, plus
//	(decide1, and     shortOverride when [7] to [16] above follow
//	each op of        [1] remaining   [2] retry   [3] reset   [4] at
//	decideMany)       -- shortLen (5) integers, or shortOvLen (15) with
//	                  the override's part (see expand)
//	reply of          the instant of the call, then per op its short reply
//	decideMany        with [4] less that instant, or -1 for an op that failed.
//	reply of refund   per op: the outcomeLen integers of a peek after the
//	                  refund, then [7] 1 if it was made (refundReply integers);
//	                  refundReply zeros when the override has gone.
//
//	override key      "x <until µs>" (a block), or "o <until µs> <limit: code
//	value             and six parameters> <algorithm> <rate> <period µs>
//	                  <burst> <id>" (see Store.SetOverride).
const (
	argvFirstKey = 3 // the index in call.argv of the first key

	keysPerOp   = 3 // KEYS of one op of decide and decide1
	decide1Args = 3 // ARGV of decide1

	manyKeysPerOp = 2 // KEYS of one op of decideMany
	manyHead      = 2 // ARGV of decideMany before its limits: instant, their count
	argvHead      = 2 // ARGV of decide and refund before the ops: instant, count
	argsPerOp     = 3 // ARGV per op of decide

	refundKeysPerOp = 2 // KEYS per op of refund
	refundArgsPerOp = 6 // ARGV per op of refund
)

// Offsets in the reply of one op.
const (
	replyAllowed = iota
	replyRemaining
	replyRetry
	replyReset
	replyState
	replyPrevState
	replyAt
	outcomeLen // the length of a reply without override
)

// Offsets in the argv of a decide1 call (see call.argv).
const (
	argv1Now   = argvFirstKey + keysPerOp
	argv1Limit = argv1Now + 1
	argv1Cost  = argv1Now + 2
)

// The short reply of one op (decide1, and each op of decideMany).
const (
	shortFlags = iota // allowed + 2*state + 8*previous state (+ shortOverride)
	shortRemaining
	shortRetry
	shortReset
	shortAt
	shortLen                                        // the length of a short reply without override
	shortOverride = 32                              // in the flags: the override's part follows
	shortOvLen    = shortLen + opReply - outcomeLen // the length of a short reply with it
)

// replyErr is the error of an unexpected reply res, with what follows.
// It formats a copy: res may be a buffer on the caller's stack, which
// formatting res itself would move to the heap on every call.
func replyErr(what string, res []int64) error {
	return fmt.Errorf("unexpected script reply %v%s", append([]int64(nil), res...), what)
}

// shortLenOf returns the length of the short reply whose flags are f, -1
// for the -1 of an op of decideMany that failed, and 0 for flags no reply
// has.
func shortLenOf(f int64) int {
	switch {
	case f == -1:
		return -1
	case f < 0 || f&^(shortOverride|31) != 0:
		return 0
	case f&shortOverride != 0:
		return shortOvLen
	}
	return shortLen
}

// expand returns the short reply res as the reply of one op of decide
// (outcomeLen integers, or opReply with the override's part), in buf.
func expand(res []int64, buf *[opReply]int64) ([]int64, error) {
	if len(res) == 0 || len(res) != shortLenOf(res[shortFlags]) {
		return nil, replyErr("", res)
	}
	f := res[shortFlags]
	buf[replyAllowed], buf[replyState], buf[replyPrevState] = f&1, f>>1&3, f>>3&3
	buf[replyRemaining], buf[replyRetry], buf[replyReset], buf[replyAt] = res[shortRemaining], res[shortRetry], res[shortReset], res[shortAt]
	if len(res) == shortLen {
		return buf[:outcomeLen], nil
	}
	copy(buf[outcomeLen:], res[shortLen:])
	return buf[:], nil
}

// Offsets in the reply of one op under an override, after the outcome.
const (
	replyOverride = outcomeLen + iota // overrideNone, overrideLimit or overrideBlock
	replyOverrideAlgorithm
	replyOverrideRate
	replyOverridePeriod
	replyOverrideBurst
	replyOverrideID
	// What the waits of the key as a whole need (algo.Spec.Handover): the
	// µs the override has left, then what the key's own state answers at
	// its end, peeked when the waits depend on it (algo.HandoverNeeds; in
	// an undoable decide, always): allowed (-1: not peeked), and the retry
	// and reset in the units of the key's own limit.
	replyLeft
	replyOwnAllowed
	replyOwnRetry
	replyOwnReset
	opReply // the length of a reply with an override; decide's per op
)

// The values of replyOverride.
const (
	overrideNone  = 0
	overrideLimit = 1
	overrideBlock = 2
)

// An undoable decide (its last argument "1") follows each op's opReply
// integers with undoLen more: undoNone (it wrote nothing to take back), or
// undoString and the state key's value and expiry (ms) before and after
// the write, or undoLog and the entry's instant, its count before (-1:
// none) and after, the warning state before (-1: none) and after, and the
// expiry before and after (see written in lua/decide.lua).
const (
	undoLen    = 8
	undoNone   = 0
	undoString = 1
	undoLog    = 2
)

// The reply of one op of refund: an outcome, then whether it was made.
const (
	refundMade  = outcomeLen
	refundReply = outcomeLen + 1
)

// decided is one op's reply: its outcome under the limit that applied.
type decided struct {
	o          algo.Outcome
	undo       []int64   // what an undoable decide wrote (undoLen integers), nil if not undoable
	cp         *compiled // the limit applied: the op's, or an override's
	overridden bool
	ovID       uint64 // the override's id (0: none, or written without one)
	blocked    bool
	blockUs    int64
	// Under an override or a block: the op's own limit, the µs the
	// override has left, and what the key's own state answers at its end
	// (see handover).
	own    *compiled
	left   int64
	ownO   algo.Outcome
	peeked bool
}

// result is the Result of d: under an override or a block, with the waits
// of the key as a whole (see handover).
func (d *decided) result() core.Result {
	res := d.described()
	if d.blocked || d.overridden {
		d.own.sp.Handover(&res, d.left, &d.ownO)
	}
	return res
}

// described is the Result of d as the limit applied describes it: under
// an override, before its end is taken into account.
func (d *decided) described() core.Result {
	if d.blocked {
		wait := time.Duration(d.blockUs) * time.Microsecond
		return core.Result{Capacity: d.cp.sp.Capacity, RetryAfter: wait, ResetAfter: wait, State: core.Throttled, Previous: core.Throttled, At: d.o.At}
	}
	res := d.cp.sp.Result(&d.o)
	if d.overridden { // the override's limit, which the Result describes
		res.Applied, res.Override = &d.cp.sp.Limit, d.ovID
	}
	return res
}

// handover reads what the waits of an op decided under an override or a
// block need (replyLeft to replyOwnReset), and checks that the script
// peeked the key's own state where they depend on it (always, when
// undoable: an undo changes the outcome after the reply).
func (d *decided) handover(res []int64, undoable bool) error {
	d.left, d.peeked = res[replyLeft], res[replyOwnAllowed] != -1
	d.ownO = algo.Outcome{Allowed: res[replyOwnAllowed] == 1, Retry: res[replyOwnRetry], Reset: res[replyOwnReset]}
	if d.left < 1 {
		return replyErr("", res)
	}
	if d.peeked {
		return nil
	}
	r := d.described()
	if retry, reset := algo.HandoverNeeds(&r, d.left); retry || reset || undoable {
		return replyErr(": the own state was not peeked", res)
	}
	return nil
}

// decode reads the short reply of one op (decide1, or one op of
// decideMany).
func (s *Store) decode(res []int64, cp *compiled, d *decided) error {
	var buf [opReply]int64
	long, err := expand(res, &buf)
	if err != nil {
		return fmt.Errorf("redisstore: %w", err)
	}
	return s.decodeOp(long, cp, d, false)
}

// decodeOp reads one op's reply of decide (see lua/decide.lua), or an
// expanded short reply: opReply integers, or outcomeLen when no override
// applies; undoable is set for an undoable decide's.
func (s *Store) decodeOp(res []int64, cp *compiled, d *decided, undoable bool) error {
	if len(res) != opReply && len(res) != outcomeLen {
		return fmt.Errorf("redisstore: %w", replyErr("", res))
	}
	d.cp, d.own = cp, cp
	if len(res) == outcomeLen {
		if err := outcome(res, &d.o); err != nil {
			return fmt.Errorf("redisstore: %w", err)
		}
		return nil
	}
	switch res[replyOverride] {
	case overrideBlock:
		d.blocked, d.blockUs = true, res[replyRetry]
		d.o = algo.Outcome{Retry: res[replyRetry], Reset: res[replyReset], State: core.Throttled, Previous: core.Throttled, At: res[replyAt]}
		if err := d.handover(res, undoable); err != nil {
			return fmt.Errorf("redisstore: %w", err)
		}
		return nil
	case overrideLimit:
		ol := core.Limit{
			Algorithm: core.Algorithm(res[replyOverrideAlgorithm]),
			Rate:      res[replyOverrideRate],
			Period:    time.Duration(res[replyOverridePeriod]) * time.Microsecond,
			Burst:     res[replyOverrideBurst],
		}
		ocp, err := s.compile(ol)
		if err != nil {
			return fmt.Errorf("redisstore: override: %w", err)
		}
		d.cp, d.overridden, d.ovID = ocp, true, uint64(max(res[replyOverrideID], 0))
	}
	if err := outcome(res[:outcomeLen], &d.o); err != nil {
		return fmt.Errorf("redisstore: %w", err)
	}
	if d.overridden {
		if err := d.handover(res, undoable); err != nil {
			return fmt.Errorf("redisstore: %w", err)
		}
	}
	return nil
}

// decodeUndoable reads one op's reply of an undoable decide: opReply
// integers, then the undoLen integers of what it wrote.
func (s *Store) decodeUndoable(res []int64, cp *compiled, d *decided) error {
	if len(res) != opReply+undoLen {
		return fmt.Errorf("redisstore: %w", replyErr("", res))
	}
	if err := s.decodeOp(res[:opReply], cp, d, true); err != nil {
		return err
	}
	d.undo = res[opReply:]
	return nil
}

// undoArg is the argument after of the refund that undoes d's admission
// (lua/refund.lua): "u", what the undoable decide wrote and the decision's
// reset, or, when it wrote nothing it could name, the reset alone.
func (d *decided) undoArg() any {
	reset := max(d.o.Reset, 0)
	if len(d.undo) != undoLen || d.undo[0] == undoNone {
		return reset
	}
	b := []byte("u")
	for _, v := range d.undo {
		b = strconv.AppendInt(append(b, ' '), v, 10)
	}
	return string(strconv.AppendInt(append(b, ' '), reset, 10))
}

// refundArgs appends ARGV of a refund of one op (lua/refund.lua): the
// instant (µs, or "-1" for Redis TIME), one op, the warning state to restore ("-1": follow the lower usage), the
// limit, the cost, the instant of the admission refunded, after: -1 for an
// admission named by its instant only, or, for a decision just received
// that is being undone, its reset or its undo (see decided.undoArg), and
// the id of the override the admission was made under (0: none).
func (s *Store) refundArgs(args []any, now any, cp *compiled, state string, cost, at int64, after any, ovID uint64) []any {
	return append(args, now, 1, state, cp.boxed, cost, at, after, strconv.FormatUint(ovID, 10))
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
func (s *Store) args(args []any, now any, cps []*compiled, ops []core.Op) []any {
	args = append(args, now, len(ops))
	for i, op := range ops {
		shadow := any("0") // a constant: boxing it allocates nothing
		if op.Shadow {
			shadow = any("1")
		}
		args = append(args, shadow, cps[i].boxed, op.Cost)
	}
	return args
}

// outcome decodes one op's reply without override: outcomeLen integers
// from replyAllowed to replyAt.
func outcome(res []int64, o *algo.Outcome) error {
	if len(res) != outcomeLen || res[replyState] < 0 || res[replyState] > 2 || res[replyPrevState] < 0 || res[replyPrevState] > 2 {
		return replyErr("", res)
	}
	*o = algo.Outcome{
		Allowed:   res[replyAllowed] == 1,
		Remaining: res[replyRemaining],
		Retry:     res[replyRetry],
		Reset:     res[replyReset],
		State:     core.State(res[replyState]),
		Previous:  core.State(res[replyPrevState]),
		At:        res[replyAt],
	}
	return nil
}
