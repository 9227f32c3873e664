package algo

import (
	"time"

	"github.com/sluicehq/sluice/core"
)

// HandoverNeeds reports what of r, the Result of a decision under an
// override or a block that ends left µs after it, the key's own state
// decides (see Handover): its RetryAfter when r is denied and the override
// admits the cost no earlier than its end (never, or at a wait of left or
// more; a block admits nothing), and its ResetAfter when the override's
// state is fresh no earlier than its end. A store peeks the key's own
// state only when one of them is true.
func HandoverNeeds(r *core.Result, left int64) (retry, reset bool) {
	end := time.Duration(left) * time.Microsecond
	return !r.Allowed && r.RetryAfter >= end, r.ResetAfter >= end
}

// Handover makes the waits of r, the Result of a decision under an
// override or a block that ends left µs after it (left >= 1), the waits
// of the key as a whole: the override's state decides before it ends, the
// key's own state, under sp (the key's own limit), from its end on (see
// docs/algorithms.md, "Waits"). own is what the own state answers at the
// override's end, with nothing else reaching it until then: Allowed and
// Retry those of a request of r's cost there (of one unit for a peek),
// Reset that of a peek there (cost 0). Both stores compute own with the
// same step functions (the Redis scripts in Lua) and call Handover.
//
// RetryAfter, when r was denied and the override admits the cost no
// earlier than its end, becomes left plus the own state's wait at the end
// (left when it admits the cost then), or RetryNever when the own limit
// can never admit the cost (above its capacity); ResetAfter, when the
// override's state is not fresh before its end, becomes left plus the own
// state's ResetAfter at the end. Either is exact: the earliest whole µs at
// which a request of that cost (or of the whole capacity of the limit in
// force then) passes, and 1µs earlier it is refused, by the override
// before its end and by the own state after.
func (sp *Spec) Handover(r *core.Result, left int64, own *Outcome) {
	retry, reset := HandoverNeeds(r, left)
	end := time.Duration(left) * time.Microsecond
	if retry {
		if own.Retry == -1 {
			r.RetryAfter = core.RetryNever
		} else {
			r.RetryAfter = addWait(end, sp.Duration(own.Retry))
		}
	}
	if reset {
		r.ResetAfter = addWait(end, sp.Duration(own.Reset))
	}
}

// addWait is a+b, or RetryNever when that would pass it.
func addWait(a, b time.Duration) time.Duration {
	if b >= core.RetryNever-a {
		return core.RetryNever
	}
	return a + b
}
