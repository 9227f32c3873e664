package middleware

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// ErrPanic is wrapped by the error of a callback that panicked.
var ErrPanic = errors.New("panicked")

// panicError returns the error of a callback what that panicked with v.
func panicError(what string, v any) error {
	return fmt.Errorf("sluice: %s %w: %v", what, ErrPanic, v)
}

// Skip calls f(a), turning a panic into an error: a request whose skip
// callback panicked is not skipped, it is undecided.
func Skip[A any](f func(A) bool, a A) (skip bool, err error) {
	defer func() {
		if v := recover(); v != nil {
			skip, err = false, panicError("WithSkip callback", v)
		}
	}()
	return f(a), nil
}

// Cost calls f(a), turning a panic into an error.
func Cost[A any](f func(A) int64, a A) (cost int64, err error) {
	defer func() {
		if v := recover(); v != nil {
			cost, err = 0, panicError("WithCost callback", v)
		}
	}()
	return f(a), nil
}

// Decide calls l.Decide, turning a panic (a key function, a tier lookup or a
// hook that panicked) into an error, so that no callback of the
// application's can take the process down with it: fasthttp and grpc-go do
// not recover handlers.
func Decide(ctx context.Context, l *core.Limiter, r keyfunc.Request, c core.Call, d *core.Decision) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = panicError("limiter", v)
		}
	}()
	return l.Decide(ctx, r, c, d)
}

// Gone reports whether the client of a request whose decision failed (or
// came from a failure policy) has gone: its context is done. Such a request
// is neither counted nor run; there is nobody to answer.
func Gone(ctx context.Context, d *core.Decision, err error) bool {
	return (err != nil || d.Degraded()) && ctx.Err() != nil
}
