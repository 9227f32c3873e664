package storekit

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/core"
)

// ValidateBooking reports why an op with maxDelay cannot be decided in a
// Take of n ops (see core.Op.MaxDelay): nil, or a *core.FieldError of field
// "MaxDelay" wrapping core.ErrInvalidCost.
func ValidateBooking(maxDelay time.Duration, n int) error {
	switch {
	case maxDelay < 0:
		return invalid(core.ErrInvalidCost, "MaxDelay", "must be >= 0, got %s", maxDelay)
	case maxDelay > 0 && n > 1:
		return invalid(core.ErrInvalidCost, "MaxDelay", "a booking is a Take of one op, not of %d", n)
	}
	return nil
}

// ValidateGroup reports why ops cannot be decided in one Take of several
// ops: nil, or a *core.FieldError wrapping core.ErrInvalidCost whose path
// names the op and the field ("ops[2].MaxDelay", "ops[2].Key"): a booking
// (see ValidateBooking), or an op whose Key an earlier op has (each op is
// decided against its Key's state before the Take, so two ops of one Key
// would each see the other's units as free, and admit more than the Limit).
func ValidateGroup(ops []core.Op) error {
	for i := range ops {
		if err := ValidateBooking(ops[i].MaxDelay, len(ops)); err != nil {
			return FieldIn(opPath(i), err)
		}
		for j := range i {
			if ops[j].Key == ops[i].Key {
				return invalid(core.ErrInvalidCost, opPath(i)+".Key", "op %d has the same Key", j)
			}
		}
	}
	return nil
}

// ValidateOverride reports why o cannot be used at now (see
// core.Store.SetOverride): nil, or an error wrapping core.ErrInvalidLimit
// whose *core.FieldError names "Until" or the field of its Limit
// ("Limit.Rate").
func ValidateOverride(o core.Override, now time.Time) error {
	if !o.Until.After(now) {
		return fmt.Errorf("%s: Override: %w", core.ErrInvalidLimit, invalid(core.ErrInvalidLimit, "Until", "must be in the future, got %s", o.Until))
	}
	if o.Blocks() {
		return nil
	}
	if err := o.Limit.Validate(); err != nil {
		var fe *core.FieldError
		if !errors.As(err, &fe) {
			return fmt.Errorf("%s: Override: Limit: %w", core.ErrInvalidLimit, err)
		}
		return fmt.Errorf("%s: Override: %w (limit %s)", core.ErrInvalidLimit, fe.In("Limit"), o.Limit)
	}
	return nil
}

// FieldIn returns err with the field it names nested under parent: the
// *core.FieldError errors.As finds in err, In(parent) (an error wrapping
// it drops the wrapping's words, which the path now says). An error naming
// no field is wrapped as "parent: err". A nil err is nil.
func FieldIn(parent string, err error) error {
	if err == nil {
		return nil
	}
	var fe *core.FieldError
	if errors.As(err, &fe) {
		return fe.In(parent)
	}
	return fmt.Errorf("%s: %w", parent, err)
}

// invalid returns a *core.FieldError of field wrapping sentinel.
func invalid(sentinel error, field, format string, args ...any) *core.FieldError {
	return &core.FieldError{Field: field, Message: fmt.Sprintf(format, args...), Err: sentinel}
}

// opPath is the path of op i of a Take in a *core.FieldError: "ops[i]", as
// every store names it.
func opPath(i int) string { return "ops[" + strconv.Itoa(i) + "]" }
