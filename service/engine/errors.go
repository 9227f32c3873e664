package engine

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/core"
)

// ErrInvalid is wrapped by every error that blames the caller's input (a
// missing dimension, a negative cost, an unknown rule): front doors answer
// it with INVALID_ARGUMENT or 400. The error is a *core.FieldError (see
// errors.As) naming the field as the native API spells it ("dimension",
// "identifier", "cost", "rule", "client_time", "endpoint",
// "idempotency_key", "descriptors[1].entries[0].key", ...), which each
// front door renames into its own vocabulary.
var ErrInvalid = errors.New("invalid input")

// invalid returns a *core.FieldError of field wrapping ErrInvalid.
func invalid(field, format string, args ...any) error {
	return &core.FieldError{Field: field, Message: fmt.Sprintf(format, args...), Err: ErrInvalid}
}
