package adminapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Problem is an RFC 9457 problem details object, the body of every error
// answer (Content-Type application/problem+json).
type Problem struct {
	// Type is "about:blank": the status says what went wrong.
	Type string `json:"type"`
	// Title is the status's reason phrase.
	Title string `json:"title"`
	// Status is the HTTP status code.
	Status int `json:"status"`
	// Detail explains this occurrence, naming the field at fault.
	Detail string `json:"detail"`
	// Instance is the request's path.
	Instance string `json:"instance,omitempty"`
	// Errors lists the fields at fault (request body members, query
	// parameters, path segments or header fields by name).
	Errors []FieldError `json:"errors,omitempty"`
}

// FieldError is one field at fault.
type FieldError struct {
	// Field names it: a body member ("window_seconds"), a query parameter
	// ("limit"), a path segment ("id") or a header field ("If-Match");
	// "body" for the body as a whole.
	Field string `json:"field"`
	// Message says what is wrong with it.
	Message string `json:"message"`
}

// apiError is an error answer: a status and the fields at fault.
type apiError struct {
	status int
	detail string
	fields []FieldError
}

func (e *apiError) Error() string { return e.detail }

// fail builds an error answer of status about field.
func fail(status int, field, format string, args ...any) *apiError {
	msg := fmt.Sprintf(format, args...)
	e := &apiError{status: status, detail: msg}
	if field != "" {
		e.detail = field + ": " + msg
		e.fields = []FieldError{{Field: field, Message: msg}}
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
	p := Problem{Type: "about:blank", Title: http.StatusText(e.status), Status: e.status, Detail: e.detail, Instance: r.URL.Path, Errors: e.fields}
	b, _ := json.Marshal(p) // a Problem always marshals
	h := w.Header()
	h.Del("ETag")
	h.Set("Content-Type", "application/problem+json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(e.status)
	_, _ = w.Write(append(b, '\n'))
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
	if errors.Is(err, errTrailing) {
		return bad("body", "trailing data after the JSON object")
	}
	if strings.Contains(err.Error(), "unexpected EOF") {
		return bad("body", "truncated JSON")
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name, _ = strconv.Unquote(name)
		if name == "" {
			return bad("body", "unknown member \"\"")
		}
		return bad(clip(name), "unknown field")
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

// storeField matches the field a rulesdb refusal names: `rule "ID": FIELD:`
// or, for refusals not about one rule, the leading `FIELD:`.
var (
	ruleField  = regexp.MustCompile(`(rule "(?:[^"\\]|\\.)*"): ([A-Za-z_.]+): `)
	leadField  = regexp.MustCompile(`^rulesdb: invalid rule: ([a-z_]+): `)
	fieldNames = map[string]string{"name": "id", "endpoints": "endpoint_pattern", "tiers": "tier", "overrides": "rule_id"}
)

// storeError translates a refusal of rulesdb (ErrInvalid) into an answer of
// status naming this API's field. A refusal of the rule alone says what is
// wrong with the field; one of the set the rule would make with the stored
// rules (conflict) names the rule the set stumbles on.
func storeError(status int, err error, conflict bool) *apiError {
	msg, _, _ := strings.Cut(err.Error(), "\n") // the first of joined errors
	field, rule := "body", ""
	if m := ruleField.FindStringSubmatchIndex(msg); m != nil {
		field, rule = msg[m[4]:m[5]], msg[m[2]:m[3]]
		msg = msg[m[1]:]
	} else if m := leadField.FindStringSubmatchIndex(msg); m != nil {
		field = msg[m[2]:m[3]]
		msg = msg[m[1]:]
	}
	if base, _, _ := strings.Cut(field, "."); fieldNames[base] != "" {
		field = fieldNames[base]
	}
	msg = strings.TrimPrefix(msg, "rulesdb: invalid rule: ")
	msg = strings.TrimPrefix(msg, "Routes: ")
	if conflict && rule != "" {
		msg = "the rules would not load together: " + rule + ": " + msg
	}
	return fail(status, field, "%s", msg)
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
