// Package badrequest renders invalid input, a *core.FieldError or several,
// as every gRPC front door of ratelimitd answers it: INVALID_ARGUMENT whose
// message lists "field: message" and whose google.rpc.BadRequest detail
// holds one FieldViolation per field (field: the path of the request's
// field, description: what is wrong with it), so that a client finds the
// field without reading the text.
package badrequest

import (
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/core"
)

// Status is INVALID_ARGUMENT naming the fields of fes in its message and
// in a BadRequest detail, in order; further details (an ErrorInfo) follow
// it.
func Status(fes []*core.FieldError, details ...*errdetails.ErrorInfo) *status.Status {
	parts := make([]string, len(fes))
	for i, fe := range fes {
		parts[i] = fe.Error()
	}
	return WithFields(status.New(codes.InvalidArgument, strings.Join(parts, "; ")), fes, details...)
}

// WithFields is st with a BadRequest detail naming the fields of fes, then
// details.
func WithFields(st *status.Status, fes []*core.FieldError, details ...*errdetails.ErrorInfo) *status.Status {
	bad := &errdetails.BadRequest{FieldViolations: make([]*errdetails.BadRequest_FieldViolation, len(fes))}
	for i, fe := range fes {
		bad.FieldViolations[i] = &errdetails.BadRequest_FieldViolation{Field: fe.Field, Description: fe.Message}
	}
	out, err := st.WithDetails(bad)
	if err != nil { // a programming error: the messages marshal
		return st
	}
	for _, d := range details {
		if more, err := out.WithDetails(d); err == nil {
			out = more
		}
	}
	return out
}

// Fields returns the fields a status of Status names, as *core.FieldError,
// in order: what a client of a gRPC front door reads back (nil for a
// status without a BadRequest detail).
func Fields(st *status.Status) []*core.FieldError {
	var out []*core.FieldError
	for _, d := range st.Details() {
		if bad, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range bad.GetFieldViolations() {
				out = append(out, &core.FieldError{Field: v.GetField(), Message: v.GetDescription()})
			}
		}
	}
	return out
}
