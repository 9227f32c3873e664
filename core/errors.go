package core

import (
	"errors"

	"github.com/sluicehq/sluice/keyfunc"
)

// Sentinel errors. Match them with errors.Is: the stores and the limiter wrap
// them with the detail of what was wrong.
var (
	// ErrInvalidLimit means a Limit or a Thresholds value cannot be used; the
	// wrapping error names the field and the bound it broke.
	ErrInvalidLimit = errors.New("sluice: invalid limit")
	// ErrInvalidCost means a negative cost was passed to Take.
	ErrInvalidCost = errors.New("sluice: invalid cost")
	// ErrNoKey means a key was empty. sluice never lets an empty key fall into
	// one shared bucket: the caller decides what an unidentified request gets.
	// It is keyfunc.ErrNoKey, so key functions and stores report one error.
	ErrNoKey = keyfunc.ErrNoKey
	// ErrClosed means the store was used after Close.
	ErrClosed = errors.New("sluice: store closed")
)
