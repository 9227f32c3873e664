package adminapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/internal/jsonbody"
	"github.com/sluicehq/sluice/service/internal/problem"
	"github.com/sluicehq/sluice/service/rules"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// Problem is an RFC 9457 problem details object, the body of every error
// answer (Content-Type application/problem+json): type "about:blank", the
// status's title, the status, a detail naming the field at fault, the
// request's path as instance, and errors listing the fields at fault.
type Problem = problem.Details

// apiError is an error answer: a status and the fields at fault.
type apiError struct {
	status int
	detail string
	fields []core.FieldError
	// committed is set for a write committed but not in force on this
	// instance: the answer names both revisions.
	committed *committed
}

// committed is the extension of a problem answering a write that is
// committed but not in force on this instance.
type committed struct {
	// Revision is the revision the write committed.
	Revision int64 `json:"revision"`
	// InForce is the revision in force on this instance.
	InForce int64 `json:"revision_in_force"`
}

// notInForce is the 503 of a write committed at nf.Revision that is not in
// force on this instance (refused, or not loaded in time).
func notInForce(nf *rulesdb.NotInForceError) *apiError {
	detail := fmt.Sprintf("the change is committed (revision %d) but was not in force on this instance in time (revision %d is): "+
		"it takes effect when the instance loads it; read the resource for its state", nf.Revision, nf.InForce)
	if nf.Refused {
		detail = fmt.Sprintf("the change is committed (revision %d) but this instance refused to put the rules in force "+
			"(revision %d stays in force; the cause is logged): correct the rules with another change", nf.Revision, nf.InForce)
	}
	return &apiError{status: http.StatusServiceUnavailable, detail: detail, committed: &committed{nf.Revision, nf.InForce}}
}

func (e *apiError) Error() string { return e.detail }

// fail builds an error answer of status about field.
func fail(status int, field, format string, args ...any) *apiError {
	msg := fmt.Sprintf(format, args...)
	e := &apiError{status: status, detail: msg}
	if field != "" {
		e.detail = field + ": " + msg
		e.fields = []core.FieldError{{Field: field, Message: msg}}
	}
	return e
}

// bad is a 400 naming field.
func bad(field, format string, args ...any) *apiError {
	return fail(http.StatusBadRequest, field, format, args...)
}

// unavailable is the answer to a database failure: its text stays in the
// log.
var unavailable = &apiError{status: http.StatusServiceUnavailable, detail: "the rules database is unavailable; try again"}

// writeProblem answers e to r as application/problem+json.
func writeProblem(w http.ResponseWriter, r *http.Request, e *apiError) {
	h := w.Header()
	h.Del("ETag")
	h.Set("Cache-Control", "no-store")
	p := problem.New(r, e.status, http.StatusText(e.status), e.detail, e.fields...)
	if e.committed != nil {
		problem.Write(w, r, e.status, struct {
			problem.Details
			*committed
		}{p, e.committed})
		return
	}
	problem.Write(w, r, e.status, p)
}

// jsonError names the field a decoding error is about.
func jsonError(err error) *apiError {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return bad("body", "invalid JSON at byte %d", syn.Offset)
	case errors.As(err, &typ):
		if typ.Field == "" {
			return bad("body", "must be a JSON object, not %s", typ.Value)
		}
		return bad(typ.Field, "must be %s, not %s", kindName(typ.Type), typ.Value)
	case errors.Is(err, errEmpty):
		return bad("body", "required: a JSON object")
	case errors.Is(err, errNotObject):
		return bad("body", "must be a JSON object")
	}
	if errors.Is(err, jsonbody.ErrTrailing) {
		return bad("body", "trailing data after the JSON object")
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return bad("body", "truncated JSON")
	}
	var fe *core.FieldError
	if errors.As(err, &fe) { // jsonbody's unknown member
		if fe.Field == "" {
			return bad("body", "unknown member \"\"")
		}
		return bad(clip(fe.Field), "%s", fe.Message)
	}
	return bad("body", "invalid JSON")
}

func kindName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int64, reflect.Int:
		return "an integer"
	case reflect.String:
		return "a string"
	case reflect.Struct:
		if t.Name() == "Time" {
			return "an RFC 3339 time"
		}
	}
	return "of another type"
}

// storeError translates a refusal of rulesdb (ErrInvalid) into an answer of
// status naming the field its *core.FieldError names, as this API's
// members are rulesdb.Rule's and Override's. A refusal of the rule alone
// says what is wrong with the field; one of the set the rule would make
// with the stored rules (conflict) names the rule the set stumbles on. Of
// joined refusals the first is answered.
func storeError(status int, err error, conflict bool) *apiError {
	if j, ok := err.(interface{ Unwrap() []error }); ok && len(j.Unwrap()) > 0 {
		err = j.Unwrap()[0]
	}
	var fe *core.FieldError
	if !errors.As(err, &fe) {
		return fail(status, "body", "%s", "the rule was refused")
	}
	msg := fe.Message
	var re *rules.RuleError
	if conflict && errors.As(err, &re) {
		msg = fmt.Sprintf("the rules would not load together: rule %q: %s", re.ID, msg)
	}
	return fail(status, fe.Field, "%s", msg)
}

// clip bounds a client-supplied string quoted back in an error.
func clip(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "?")
	}
	return s
}
