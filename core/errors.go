package core

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/keyfunc"
)

// Sentinel errors. Match them with errors.Is: the stores and the limiter wrap
// them with the detail of what was wrong.
var (
	// ErrInvalidLimit means a Limit or a Thresholds value cannot be used; the
	// wrapping error names the field and the bound it broke.
	ErrInvalidLimit = errors.New("sluice: invalid limit")
	// ErrInvalidCost means a Take's ops cannot be decided: a negative cost,
	// a negative MaxDelay, a booking among several ops, or two ops of one
	// Key (see storekit.ValidateGroup).
	ErrInvalidCost = errors.New("sluice: invalid cost")
	// ErrNoKey means a key was empty. sluice never lets an empty key fall into
	// one shared bucket: the caller decides what an unidentified request gets.
	// It is keyfunc.ErrNoKey, so key functions and stores report one error.
	ErrNoKey = keyfunc.ErrNoKey
	// ErrClosed means the store was used after Close.
	ErrClosed = errors.New("sluice: store closed")
)

// FieldError is a value refused for one of its fields. Every validation of
// package core returns one, however deeply it is wrapped: Limit.Validate,
// ParseAlgorithm, Thresholds.Validate, ValidatePolicyName, ValidateMethod,
// ValidateLease, the policies of NewLimiter and SetPolicies, the ops of
// CheckGroup and the arguments of the key-level calls; the stores of sluice
// (and package storekit's validation, which they call) return one for an
// op they refuse.
// Find it with errors.As:
//
//	var fe *core.FieldError
//	if errors.As(err, &fe) {
//		fmt.Println(fe.Field, fe.Message) // Rate must be at least 1, got 0
//	}
//
// Field is a path from the value validated to the field at fault, in the
// Go names of its types: "Rate" for a Limit, "Limit.Burst" and
// `Tiers["gold"].Period` for a Policy, "ops[2].Key.Identity" for a Take.
// A caller that validates a value inside a larger one nests the path with
// In (or storekit.FieldIn), so that "ops[2]" and "Limit.Rate" make
// "ops[2].Limit.Rate"; a front door that speaks another vocabulary (a file
// format, a JSON API) renames the path's names into its own, never the
// Message. Message says what is wrong, for a person, without the field's
// name. Err is the sentinel the refusal belongs to (ErrInvalidLimit,
// ErrInvalidCost, ErrNoKey), or nil: errors.Is finds it through the
// FieldError, whose text does not repeat it.
//
// A FieldError is not modified once returned; it encodes as JSON
// {"field": ..., "message": ...}, the shape of the service's problem
// details.
type FieldError struct {
	// Field is the path of the field at fault.
	Field string `json:"field"`
	// Message says what is wrong with it.
	Message string `json:"message"`
	// Err is the sentinel error wrapped, or nil.
	Err error `json:"-"`
}

// Error returns "Field: Message".
func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// Unwrap returns Err.
func (e *FieldError) Unwrap() error { return e.Err }

// In returns a copy of e whose Field is nested under parent: "ops[2]" and
// "Limit.Rate" make "ops[2].Limit.Rate", and an index or key joins without
// a dot ("Tiers" and `["gold"].Rate` make `Tiers["gold"].Rate`). An empty
// parent returns e.
func (e *FieldError) In(parent string) *FieldError {
	if parent == "" {
		return e
	}
	c := *e
	switch {
	case c.Field == "":
		c.Field = parent
	case strings.HasPrefix(c.Field, "["):
		c.Field = parent + c.Field
	default:
		c.Field = parent + "." + c.Field
	}
	return &c
}

// invalidField returns a *FieldError of field wrapping sentinel.
func invalidField(sentinel error, field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, args...), Err: sentinel}
}

// nested is err inside a message that already starts with "sluice: ": its
// text without that prefix, so that a sentinel's own prefix is not repeated
// ("sluice: policy "a": invalid limit: Rate: ..."), and it wraps err.
type nested struct{ err error }

func (e nested) Error() string { return strings.TrimPrefix(e.err.Error(), "sluice: ") }

func (e nested) Unwrap() error { return e.err }
