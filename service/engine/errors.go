package engine

import (
	"errors"
	"fmt"
)

// ErrInvalid is wrapped by every error that blames the caller's input (a
// missing dimension, a negative cost, an unknown rule): front doors answer
// it with INVALID_ARGUMENT or 400. Use errors.As with *FieldError to learn
// the field.
var ErrInvalid = errors.New("invalid input")

// FieldError is an invalid input: the field it names (as the native API
// spells it: "dimension", "identifier", "cost", "rule", "client_time",
// "endpoint", "idempotency_key", "descriptors[1].entries[0].key", ...) and
// what is wrong with it. It wraps ErrInvalid.
type FieldError struct {
	// Field names the offending field.
	Field string
	// Message says what is wrong, for the caller.
	Message string
}

// Error returns "field: message".
func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// Unwrap returns ErrInvalid.
func (e *FieldError) Unwrap() error { return ErrInvalid }

// invalid returns a *FieldError.
func invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
}
