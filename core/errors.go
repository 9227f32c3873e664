package core

import (
	"errors"
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
	// Key (see ValidateGroup).
	ErrInvalidCost = errors.New("sluice: invalid cost")
	// ErrNoKey means a key was empty. sluice never lets an empty key fall into
	// one shared bucket: the caller decides what an unidentified request gets.
	// It is keyfunc.ErrNoKey, so key functions and stores report one error.
	ErrNoKey = keyfunc.ErrNoKey
	// ErrClosed means the store was used after Close.
	ErrClosed = errors.New("sluice: store closed")
)

// nested is err inside a message that already starts with "sluice: ": its
// text without that prefix, so that a sentinel's own prefix is not repeated
// ("sluice: policy "a": invalid limit: Rate: ..."), and it wraps err.
type nested struct{ err error }

func (e nested) Error() string { return strings.TrimPrefix(e.err.Error(), "sluice: ") }

func (e nested) Unwrap() error { return e.err }
