package remotestore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/ratelimitv1"
)

// ErrorDomain is the domain of the google.rpc.ErrorInfo detail the server
// attaches to an INVALID_ARGUMENT status; its reason names the sentinel
// error of package core that the client wraps again.
const ErrorDomain = "sluice.dev"

// The reasons of ErrorInfo, one per sentinel error of package core that a
// store returns for bad input.
var reasons = []struct {
	reason string
	err    error
}{
	{"INVALID_LIMIT", core.ErrInvalidLimit},
	{"INVALID_COST", core.ErrInvalidCost},
	{"NO_KEY", core.ErrNoKey},
	{"CANNOT_RESERVE", core.ErrCannotReserve},
	{"EXCEEDS_CAPACITY", core.ErrExceedsCapacity},
}

// ErrUnavailable means the server answered that its store failed, or that
// it could not be reached. The guard answers it by its failure mode.
var ErrUnavailable = errors.New("remotestore: store unavailable")

// unavailableMessage is the only text a client gets for a store failure.
const unavailableMessage = "the store failed"

// invalidError is an INVALID_ARGUMENT answer rebuilt on the client: the
// server's text (which names the op and the field), wrapping the sentinel.
type invalidError struct {
	method, msg string
	sentinel    error
}

func (e *invalidError) Error() string { return "remotestore: " + e.method + ": " + e.msg }

func (e *invalidError) Unwrap() error { return e.sentinel }

// remoteError is any other failure of a call: it wraps both the gRPC status
// error (status.FromError and status.Code find it) and a sentinel
// (ErrUnavailable, or the context's error) for errors.Is.
type remoteError struct {
	method string
	status error
	kind   error
}

func (e *remoteError) Error() string {
	return "remotestore: " + e.method + ": " + e.status.Error()
}

func (e *remoteError) Unwrap() []error { return []error{e.kind, e.status} }

// classify turns the error of a call on the server's store into what the
// client receives: bad input as INVALID_ARGUMENT with its text and the
// reason of its sentinel; the caller's context ending as its code; any other
// failure as UNAVAILABLE with a generic message, its cause logged.
func classify(ctx context.Context, log *slog.Logger, method string, err error) (code codes.Code, msg, reason string) {
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return codes.InvalidArgument, err.Error(), r.reason
		}
	}
	if cerr := ctx.Err(); cerr != nil {
		st := status.FromContextError(cerr)
		return st.Code(), st.Message(), ""
	}
	log.LogAttrs(ctx, slog.LevelError, "remotestore: store call failed", slog.String("method", method), slog.Any("error", err))
	return codes.Unavailable, unavailableMessage, ""
}

// toStatus is classify's answer as a gRPC status error.
func toStatus(ctx context.Context, log *slog.Logger, method string, err error) error {
	code, msg, reason := classify(ctx, log, method, err)
	st := status.New(code, msg)
	if reason != "" {
		if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}); derr == nil {
			st = d
		}
	}
	return st.Err()
}

// toWire is classify's answer as the error of one Take of a batch.
func toWire(ctx context.Context, log *slog.Logger, err error) *ratelimitv1.StoreError {
	code, msg, reason := classify(ctx, log, "TakeBatch", err)
	return &ratelimitv1.StoreError{Code: int32(code), Message: msg, Reason: reason}
}

// fromStatus turns the error of an RPC back into what a local store would
// have returned: bad input wrapping its sentinel of package core, a
// deadline or cancellation wrapping the context's error, anything else
// wrapping ErrUnavailable and the status.
func fromStatus(method string, err error) error {
	st, _ := status.FromError(err)
	reason := ""
	if st.Code() == codes.InvalidArgument {
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain {
				reason = info.GetReason()
			}
		}
	}
	return fromCode(method, st.Code(), st.Message(), reason, err)
}

// fromWire is fromStatus for the error of one Take of a batch.
func fromWire(e *ratelimitv1.StoreError) error {
	code := codes.Code(e.Code)
	return fromCode("Take", code, e.Message, e.Reason, status.Error(code, e.Message))
}

// fromCode builds the client's error from a status's parts; err is the
// status error itself.
func fromCode(method string, code codes.Code, msg, reason string, err error) error {
	switch code {
	case codes.InvalidArgument:
		for _, r := range reasons {
			if r.reason == reason {
				return &invalidError{method: method, msg: msg, sentinel: r.err}
			}
		}
		// Not our server's answer: a failure of the call, not the caller's fault.
	case codes.DeadlineExceeded:
		return &remoteError{method: method, status: err, kind: context.DeadlineExceeded}
	case codes.Canceled:
		return &remoteError{method: method, status: err, kind: context.Canceled}
	}
	return &remoteError{method: method, status: err, kind: ErrUnavailable}
}

// opError names the op (i >= 0; none for a negative i) and the field of a
// conversion error on the server.
func opError(i int, field string, sentinel error, format string, args ...any) error {
	if i < 0 {
		return fmt.Errorf("%s: %w: %s", field, sentinel, fmt.Sprintf(format, args...))
	}
	return fmt.Errorf("op %d: %s: %w: %s", i, field, sentinel, fmt.Sprintf(format, args...))
}

// ctxStatus is the status of a call whose context ended.
func ctxStatus(ctx context.Context) error { return status.FromContextError(ctx.Err()).Err() }
