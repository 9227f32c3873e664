package remotestore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/internal/badrequest"
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
// server's text (which names the op and the field), wrapping the
// *core.FieldError of the field the server named (in core's names, as a
// local store names it: ops[1].Limit.Rate) when it named one, and the
// sentinel.
type invalidError struct {
	method, msg string
	field       *core.FieldError
	sentinel    error
}

func (e *invalidError) Error() string { return "remotestore: " + e.method + ": " + e.msg }

func (e *invalidError) Unwrap() []error {
	if e.field != nil {
		return []error{e.field, e.sentinel}
	}
	return []error{e.sentinel}
}

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

// answer is what the client receives for an error: its code and message,
// and for bad input the reason of its sentinel and the field at fault, as
// the request's message names it (ops[1].limit.rate; nil when the error
// names none).
type answer struct {
	code   codes.Code
	msg    string
	reason string
	field  *core.FieldError
}

// classify turns the error of a call on the server's store into what the
// client receives: bad input as INVALID_ARGUMENT with its text, the reason
// of its sentinel and its field; the caller's context ending as its code;
// any other failure as UNAVAILABLE with a generic message, its cause logged.
func classify(ctx context.Context, log *slog.Logger, method string, err error) answer {
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			a := answer{code: codes.InvalidArgument, msg: err.Error(), reason: r.reason}
			var fe *core.FieldError
			if errors.As(err, &fe) {
				a.field = &core.FieldError{Field: wireField(fe.Field), Message: fe.Message}
			}
			return a
		}
	}
	if cerr := ctx.Err(); cerr != nil {
		st := status.FromContextError(cerr)
		return answer{code: st.Code(), msg: st.Message()}
	}
	log.LogAttrs(ctx, slog.LevelError, "remotestore: store call failed", slog.String("method", method), slog.Any("error", err))
	return answer{code: codes.Unavailable, msg: unavailableMessage}
}

// toStatus is classify's answer as a gRPC status error: bad input with a
// BadRequest detail naming its field (when it names one) and an ErrorInfo
// naming its sentinel.
func toStatus(ctx context.Context, log *slog.Logger, method string, err error) error {
	a := classify(ctx, log, method, err)
	st := status.New(a.code, a.msg)
	if a.reason == "" {
		return st.Err()
	}
	info := &errdetails.ErrorInfo{Reason: a.reason, Domain: ErrorDomain}
	if a.field == nil {
		if d, derr := st.WithDetails(info); derr == nil {
			st = d
		}
		return st.Err()
	}
	return badrequest.WithFields(st, []*core.FieldError{a.field}, info).Err()
}

// toWire is classify's answer as the error of one Take of a batch.
func toWire(ctx context.Context, log *slog.Logger, err error) *ratelimitv1.StoreError {
	a := classify(ctx, log, "TakeBatch", err)
	e := &ratelimitv1.StoreError{Code: int32(a.code), Message: a.msg, Reason: a.reason}
	if a.field != nil {
		e.Field, e.FieldDescription = a.field.Field, a.field.Message
	}
	return e
}

// fromStatus turns the error of an RPC back into what a local store would
// have returned: bad input wrapping its sentinel of package core, a
// deadline or cancellation wrapping the context's error, anything else
// wrapping ErrUnavailable and the status.
func fromStatus(method string, err error) error {
	st, _ := status.FromError(err)
	a := answer{code: st.Code(), msg: st.Message()}
	if a.code == codes.InvalidArgument {
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain {
				a.reason = info.GetReason()
			}
		}
		if fs := badrequest.Fields(st); len(fs) > 0 {
			a.field = fs[0]
		}
	}
	return fromAnswer(method, a, err)
}

// fromWire is fromStatus for the error of one Take of a batch.
func fromWire(e *ratelimitv1.StoreError) error {
	a := answer{code: codes.Code(e.Code), msg: e.Message, reason: e.Reason}
	if e.Field != "" {
		a.field = &core.FieldError{Field: e.Field, Message: e.FieldDescription}
	}
	return fromAnswer("Take", a, status.Error(a.code, a.msg))
}

// fromAnswer builds the client's error from a status's parts; err is the
// status error itself.
func fromAnswer(method string, a answer, err error) error {
	switch a.code {
	case codes.InvalidArgument:
		for _, r := range reasons {
			if r.reason == a.reason {
				e := &invalidError{method: method, msg: a.msg, sentinel: r.err}
				if a.field != nil {
					e.field = &core.FieldError{Field: goField(a.field.Field), Message: a.field.Message, Err: r.err}
				}
				return e
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

// opError is a conversion error on the server: a *core.FieldError naming
// field (core's names) of op i (none for a negative i), wrapping sentinel.
func opError(i int, field string, sentinel error, format string, args ...any) error {
	if i >= 0 {
		field = fmt.Sprintf("ops[%d].%s", i, field)
	}
	return &core.FieldError{Field: field, Message: fmt.Sprintf(format, args...), Err: sentinel}
}

// wireField is the path of a field of a request (in core's names, as a
// store's *core.FieldError gives it: ops[1].Limit.MaxDelay) in the
// request's message (ops[1].limit.max_delay): each Go name in snake_case.
func wireField(path string) string {
	var b strings.Builder
	for i := 0; i < len(path); i++ {
		c := path[i]
		if c >= 'A' && c <= 'Z' {
			if i > 0 && path[i-1] != '.' {
				b.WriteByte('_')
			}
			c += 'a' - 'A'
		}
		b.WriteByte(c)
	}
	return b.String()
}

// goField is wireField's inverse: a path of the request's message in
// core's names, each name of a message field in CamelCase (the names of
// the repeated fields, ops and takes, stay: they name Take's arguments).
func goField(path string) string {
	parts := strings.Split(path, ".")
	for i, p := range parts {
		if strings.IndexByte(p, '[') >= 0 || p == "ops" || p == "takes" {
			continue
		}
		words := strings.Split(p, "_")
		for j, w := range words {
			if w != "" {
				words[j] = strings.ToUpper(w[:1]) + w[1:]
			}
		}
		parts[i] = strings.Join(words, "")
	}
	return strings.Join(parts, ".")
}

// ctxStatus is the status of a call whose context ended.
func ctxStatus(ctx context.Context) error { return status.FromContextError(ctx.Err()).Err() }
