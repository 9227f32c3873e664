package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/fieldfmt"
	"github.com/sluicehq/sluice/ratelimitfields"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/internal/jsonbody"
	"github.com/sluicehq/sluice/service/internal/nginxuri"
	"github.com/sluicehq/sluice/service/internal/problem"
	"github.com/sluicehq/sluice/service/internal/rawtext"
)

// Path is where ratelimitd serves the handler.
const Path = "/api/v1/rate-limit/check"

// MaxBody bounds a request body; a larger one is answered 413.
const MaxBody = 64 << 10

// Bounds on the fields, in bytes: a longer value is answered 400 naming
// the field. They are the engine's, so every API refuses the same input.
const (
	MaxKeyType        = engine.MaxDimension
	MaxKeyValue       = engine.MaxIdentifier
	MaxRuleID         = engine.MaxRule
	MaxEndpoint       = engine.MaxEndpoint
	MaxIdempotencyKey = engine.MaxIdempotencyKey
)

// Checker decides one check. *engine.Engine is the Checker ratelimitd
// serves.
type Checker interface {
	Check(ctx context.Context, c engine.Check) (engine.Result, error)
}

// Request is the JSON body of a check (all names snake_case; unknown names
// are rejected).
type Request struct {
	// KeyType is the dimension of KeyValue: "user", "ip", "api_key" or any
	// name a rule uses. Required.
	KeyType string `json:"key_type"`
	// KeyValue is the caller counted: a user id, an address, a key.
	// Required.
	KeyValue string `json:"key_value"`
	// RuleID, when set, decides the check under that rule only.
	RuleID string `json:"rule_id,omitempty"`
	// Endpoint is the operation called; rules match it by their endpoint
	// patterns.
	Endpoint string `json:"endpoint,omitempty"`
	// RequestCount is the cost: absent means 1, 0 peeks (nothing is
	// consumed), negative is invalid.
	RequestCount *int64 `json:"request_count,omitempty"`
	// IdempotencyKey makes a retry of an admitted check free.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// Response is the JSON body of an answer.
type Response struct {
	// Allowed is false when a rule denied the check.
	Allowed bool `json:"allowed"`
	// Limit is the deciding rule's capacity (the limit applied: a tier's,
	// an override's, or, in fallback, the local limiter's share), whoever
	// answered; Remaining what is left of it (0 and 0 when no rule applies;
	// Remaining null when the guard failed open or closed and no counter
	// was read: see Degraded).
	Limit     int64 `json:"limit"`
	Remaining int64 `json:"remaining"`
	// ResetAt is when the deciding rule's key is fresh again (RFC 3339,
	// UTC); null when no rule applies, or no counter was read.
	ResetAt *time.Time `json:"reset_at"`
	// RetryAfter is, when denied, the seconds to wait before a check of the
	// same cost passes, fractional, rounded up to the millisecond (the
	// Retry-After header carries it rounded up to whole seconds); 0 when
	// allowed; null when the check can never pass (its cost exceeds the
	// capacity).
	RetryAfter *float64 `json:"retry_after"`
	// Rule is the rule that decided: the denying one, or the one closest to
	// its limit; "" when no rule applies.
	Rule string `json:"rule"`
	// State is the deciding key's warning state: "normal", "warning" or
	// "throttled".
	State string `json:"state"`
	// Degraded is absent when the limiter decided on its store. Otherwise
	// it names the failure mode that answered because the store could
	// not (engine.DegradedName, also sent in the Sluice-Degraded header):
	// "fail_open" (allowed unchecked) or "fail_closed" (denied unchecked),
	// where no counter was read, so remaining and reset_at are null and
	// limit is the rule's; or "fallback", where a local limiter decided on
	// its share of the limit, which limit and remaining state.
	Degraded string `json:"degraded,omitempty"`
}

// MarshalJSON writes r, with remaining null when r.Degraded is "fail_open"
// or "fail_closed" (no counter was read: 0 would be false).
func (r Response) MarshalJSON() ([]byte, error) {
	type plain Response // without this method
	if r.Degraded != engine.DegradedName(core.FailedOpen) && r.Degraded != engine.DegradedName(core.FailedClosed) {
		return json.Marshal(plain(r))
	}
	return json.Marshal(struct {
		plain
		Remaining *int64 `json:"remaining"`
	}{plain: plain(r)})
}

// Handler serves POST (and GET) /api/v1/rate-limit/check. It is safe for
// concurrent use. Build one with New.
type Handler struct {
	checker    Checker
	log        *slog.Logger
	fields     ratelimitfields.Config
	formatter  *engine.Formatter // of fields
	statusMode bool
	denyStatus int
	now        func() time.Time
}

// Option configures a Handler.
type Option func(*Handler)

// WithStatusMode sets the mode of requests that do not name one: false (the
// default) answers 200 with "allowed": false on a denial; true answers the
// deny status (429 unless WithDenyStatus says otherwise) with Retry-After,
// and 200 when allowed, for proxies that read only the status, such as
// nginx auth_request. A request chooses its own with ?mode=status or
// ?mode=body.
func WithStatusMode(on bool) Option { return func(h *Handler) { h.statusMode = on } }

// WithDenyStatus sets the status of a denial in status mode: 429 (the
// default), 403 or 401. nginx auth_request treats any status but 2xx, 401 and
// 403 as an error (it answers 500), so behind nginx use 403 and map it to
// 429 there (see the package documentation); a request may choose with
// ?deny_status=. Other values are ignored.
func WithDenyStatus(code int) Option {
	return func(h *Handler) {
		if validDenyStatus(code) {
			h.denyStatus = code
		}
	}
}

// WithFields sets which rate-limit header fields are sent (all by default:
// RateLimit, RateLimit-Policy, X-RateLimit-*, Retry-After on a denial).
func WithFields(c ratelimitfields.Config) Option { return func(h *Handler) { h.fields = c } }

// WithLogger sets the logger store failures are reported to (they never
// reach the client). The default is slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(h *Handler) {
		if l != nil {
			h.log = l
		}
	}
}

// New returns a Handler deciding on c.
func New(c Checker, opts ...Option) *Handler {
	h := &Handler{checker: c, log: slog.Default(), denyStatus: http.StatusTooManyRequests, now: time.Now}
	for _, o := range opts {
		o(h)
	}
	h.formatter = engine.NewFormatter(h.fields)
	return h
}

func validDenyStatus(code int) bool {
	return code == http.StatusTooManyRequests || code == http.StatusForbidden || code == http.StatusUnauthorized
}

// failure is an error answer: its status and title, and the field at
// fault (nil when it names none, then detail says what failed).
type failure struct {
	status int
	title  string
	field  *core.FieldError
	detail string
}

// fieldFailure is the answer status (titled title) to the field at fault.
func fieldFailure(status int, title, field, format string, args ...any) *failure {
	return &failure{status: status, title: title, field: &core.FieldError{Field: field, Message: fmt.Sprintf(format, args...)}}
}

// badField is a 400 naming field.
func badField(field, format string, args ...any) *failure {
	return fieldFailure(http.StatusBadRequest, "invalid request", field, format, args...)
}

// ServeHTTP decides the check r asks for.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost && r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET, POST")
		writeProblem(w, r, fieldFailure(http.StatusMethodNotAllowed, "method not allowed",
			"method", "%s is not served: use POST (JSON body) or GET (query parameters)", r.Method))
		return
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeProblem(w, r, badField("query", "malformed query string"))
		return
	}
	statusMode, denyStatus, ferr := h.mode(q)
	if ferr != nil {
		writeProblem(w, r, ferr)
		return
	}
	req, ferr := readRequest(w, r, q)
	if ferr != nil {
		writeProblem(w, r, ferr)
		return
	}
	c, ferr := check(req)
	if ferr != nil {
		writeProblem(w, r, ferr)
		return
	}
	res, err := h.checker.Check(r.Context(), c)
	if err != nil {
		if errors.Is(err, engine.ErrInvalid) {
			writeProblem(w, r, engineError(err))
			return
		}
		if r.Context().Err() == nil {
			h.log.LogAttrs(r.Context(), slog.LevelError, "httpapi: check failed",
				slog.String("key_type", c.Dimension), slog.Any("error", err))
		}
		writeProblem(w, r, &failure{status: http.StatusServiceUnavailable, title: "no decision",
			detail: "the rate limit decision could not be made"})
		return
	}
	h.answer(w, &res, statusMode, denyStatus)
}

// mode returns the mode and deny status the query chooses.
func (h *Handler) mode(q url.Values) (statusMode bool, denyStatus int, _ *failure) {
	statusMode, denyStatus = h.statusMode, h.denyStatus
	switch m := q.Get("mode"); m {
	case "":
	case "status":
		statusMode = true
	case "body":
		statusMode = false
	default:
		return false, 0, badField("mode", "%q is not a mode (known: status, body)", clip(m))
	}
	if s := q.Get("deny_status"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || !validDenyStatus(n) {
			return false, 0, badField("deny_status", "%q is not one of 429, 403, 401", clip(s))
		}
		denyStatus = n
	}
	return statusMode, denyStatus, nil
}

// The query parameters and headers a bodiless request may carry its fields
// in (a query parameter wins over its header).
var (
	queryFields  = []string{"key_type", "key_value", "rule_id", "endpoint", "request_count", "idempotency_key"}
	headerFields = []string{"Sluice-Key-Type", "Sluice-Key-Value", "Sluice-Rule-Id", "Sluice-Endpoint", "Sluice-Request-Count", "Sluice-Idempotency-Key"}
)

// readRequest reads the check from r: from its JSON body when it has one,
// else from the query parameters and the Sluice-* headers.
func readRequest(w http.ResponseWriter, r *http.Request, q url.Values) (Request, *failure) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return Request{}, fieldFailure(http.StatusRequestEntityTooLarge, "body too large", "body", "larger than %d bytes", MaxBody)
		}
		return Request{}, badField("body", "could not be read")
	}
	for k := range q {
		if k != "mode" && k != "deny_status" && k != "merge_slashes" && !slices.Contains(queryFields, k) {
			return Request{}, badField(clip(k), "unknown query parameter (known: mode, deny_status, merge_slashes, %s)", strings.Join(queryFields, ", "))
		}
	}
	if len(bytes.TrimSpace(body)) == 0 || proxied(q) || r.Header.Get("Sluice-Key-Type") != "" || r.Header.Get("Sluice-Key-Value") != "" {
		// A query or headers naming the key are a proxy's configuration:
		// a body is then the client's own request body (an auth_request
		// location without proxy_pass_request_body off forwards it),
		// never the check.
		return fromQuery(r, q)
	}
	if ct := r.Header.Get("Content-Type"); !isJSON(ct) {
		return Request{}, fieldFailure(http.StatusUnsupportedMediaType, "unsupported media type", "Content-Type", "%q is not application/json", clip(ct))
	}
	return fromJSON(body)
}

// fromJSON decodes a body strictly: one object, known fields, right types.
func fromJSON(body []byte) (Request, *failure) {
	// Before decoding: encoding/json would turn invalid UTF-8 (and unpaired
	// surrogate escapes) into U+FFFD, so two different identifiers would
	// share one counter.
	if inv := rawtext.JSON(body, ""); inv != nil {
		return Request{}, badField(clip(inv.Field), "%s", inv.Message)
	}
	if req, ok := decodePlain(body); ok {
		return req, nil
	}
	var req Request
	if err := jsonbody.Decode(body, &req); err != nil {
		if errors.Is(err, jsonbody.ErrTrailing) {
			return Request{}, badField("body", "trailing data after the JSON object")
		}
		return Request{}, jsonError(err)
	}
	return req, nil
}

// jsonError names the field a decoding error is about.
func jsonError(err error) *failure {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return badField("body", "invalid JSON at byte %d", syn.Offset)
	case errors.As(err, &typ):
		if typ.Field == "" {
			return badField("body", "must be a JSON object, not %s", typ.Value)
		}
		want := "a string"
		if typ.Type.Kind() == reflect.Int64 {
			want = "an integer from 0 to 9223372036854775807"
		}
		return badField(typ.Field, "must be %s, not %s", want, typ.Value)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return badField("body", "truncated JSON")
	}
	var fe *core.FieldError
	if errors.As(err, &fe) { // jsonbody's unknown member
		return badField(clip(fe.Field), "unknown field (known: %s)", strings.Join(queryFields, ", "))
	}
	return badField("body", "invalid JSON")
}

// fromQuery reads a bodiless request (GET, or nginx auth_request's
// subrequest) from its query parameters and headers.
//
// A query that names the key (key_type or key_value) is a proxy's
// configuration, and the headers of its subrequest may be the client's own
// (nginx forwards them unless proxy_pass_request_headers is off): then no
// Sluice-* header is read. Sluice-Rule-Id, Sluice-Endpoint and
// Sluice-Request-Count would let a client pick its rule, an endpoint no
// rule matches, or a peek, and Sluice-Idempotency-Key a key it repeats to
// get free requests: a proxy that wants an idempotency key passes it in
// the query, by its own choice.
func fromQuery(r *http.Request, q url.Values) (Request, *failure) {
	merge, ferr := mergeSlashes(q)
	if ferr != nil {
		return Request{}, ferr
	}
	proxied := proxied(q)
	var vals [6]string
	for i, name := range queryFields {
		var vs []string
		field := name
		if qv, ok := q[name]; ok {
			vs = qv
		} else if !proxied {
			vs, field = r.Header.Values(headerFields[i]), headerFields[i]
		}
		if len(vs) > 1 {
			return Request{}, badField(field, "given %d times", len(vs))
		}
		if len(vs) == 1 {
			vals[i] = vs[0]
		}
	}
	req := Request{KeyType: vals[0], KeyValue: vals[1], RuleID: vals[2], Endpoint: vals[3], IdempotencyKey: vals[5]}
	if req.Endpoint == "" {
		p, ferr := originalPath(r, merge)
		if ferr != nil {
			return Request{}, ferr
		}
		req.Endpoint = p
	}
	if s := vals[4]; s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return Request{}, badField("request_count", "%q is not an integer from 0 to 9223372036854775807", clip(s))
		}
		req.RequestCount = &n
	}
	return req, nil
}

// originalPath returns the endpoint of X-Original-URI ("" without one):
// nginx's documented auth_request setup sends its $request_uri there, the
// target as the client wrote it ("/login#x", "//api/../login",
// "/lo%67in"), while nginx chose the location on the normalized path
// ($uri). The endpoint is that path, computed as nginx does (merge tells
// nginx's merge_slashes); a target nginx refuses is refused here too,
// never decided on as written.
func originalPath(r *http.Request, merge bool) (string, *failure) {
	vs := r.Header.Values("X-Original-URI")
	switch {
	case len(vs) == 0:
		return "", nil
	case len(vs) > 1:
		return "", badField("X-Original-URI", "given %d times", len(vs))
	}
	p, err := nginxuri.Path(vs[0], merge)
	if err != nil {
		reason := "not a request target"
		var e *nginxuri.Error
		if errors.As(err, &e) {
			reason = e.Reason
		}
		return "", badField("X-Original-URI", "%s: nginx refuses such a request target", reason)
	}
	return p, nil
}

// mergeSlashes reads ?merge_slashes, nginx's setting of that name: on (the
// default) or off.
func mergeSlashes(q url.Values) (bool, *failure) {
	switch ms := q["merge_slashes"]; {
	case len(ms) > 1:
		return false, badField("merge_slashes", "given %d times", len(ms))
	case len(ms) == 0 || ms[0] == "on":
		return true, nil
	case ms[0] == "off":
		return false, nil
	default:
		return false, badField("merge_slashes", "%q is not on or off", clip(ms[0]))
	}
}

// proxied reports whether the query names the key (key_type or
// key_value): the check is a proxy's, configured in its query, and the
// request's headers and body are its client's.
func proxied(q url.Values) bool {
	_, t := q["key_type"]
	_, v := q["key_value"]
	return t || v
}

// check validates req and translates it into the engine's Check.
func check(req Request) (engine.Check, *failure) {
	for _, f := range []struct {
		name, v string
		max     int
		req     bool
	}{
		{"key_type", req.KeyType, MaxKeyType, true},
		{"key_value", req.KeyValue, MaxKeyValue, true},
		{"rule_id", req.RuleID, MaxRuleID, false},
		{"endpoint", req.Endpoint, MaxEndpoint, false},
		{"idempotency_key", req.IdempotencyKey, MaxIdempotencyKey, false},
	} {
		switch {
		case f.req && f.v == "":
			return engine.Check{}, badField(f.name, "required")
		case len(f.v) > f.max:
			return engine.Check{}, badField(f.name, "longer than %d bytes", f.max)
		}
	}
	cost := int64(1)
	if req.RequestCount != nil {
		cost = *req.RequestCount
		if cost < 0 {
			return engine.Check{}, badField("request_count", "must not be negative (0 peeks)")
		}
	}
	return engine.Check{
		Dimension:      req.KeyType,
		Identifier:     req.KeyValue,
		Endpoint:       req.Endpoint,
		Rule:           req.RuleID,
		Cost:           cost,
		IdempotencyKey: req.IdempotencyKey,
	}, nil
}

// engineFields are this API's names of the engine's fields where they
// differ.
var engineFields = map[string]string{"dimension": "key_type", "identifier": "key_value", "cost": "request_count", "rule": "rule_id"}

// engineError is an invalid-input error of the engine (a *core.FieldError),
// with this API's field names.
func engineError(err error) *failure {
	var fe *core.FieldError
	if !errors.As(err, &fe) {
		return &failure{status: http.StatusBadRequest, title: "invalid request", detail: "invalid request"}
	}
	field := fe.Field
	if name, ok := engineFields[field]; ok {
		field = name
	}
	return badField(field, "%s", fe.Message)
}

// answer writes the decision.
func (h *Handler) answer(w http.ResponseWriter, res *engine.Result, statusMode bool, denyStatus int) {
	a := answerBody{allowed: res.Allowed, rule: res.Rule, state: res.State.String(), degraded: engine.DegradedName(res.Degraded)}
	switch {
	case res.Rule == "":
	case engine.Unchecked(res.Degraded): // the limit, no counter
		a.limit = res.Limit
	default:
		a.limit, a.remaining, a.resetAt, a.reset = res.Limit, res.Remaining, res.ResetAt.UTC(), true
	}
	if !res.Allowed {
		if res.RetryAfter == core.RetryNever {
			a.never = true
		} else {
			ms := (res.RetryAfter + time.Millisecond - 1) / time.Millisecond
			a.retry = float64(ms) / 1000
		}
	}
	h.headers(w.Header(), res, a.degraded)
	var buf [256]byte
	body := appendAnswer(buf[:0], &a)
	code := http.StatusOK
	if statusMode && !res.Allowed {
		code = denyStatus
	}
	w.WriteHeader(code)
	_, _ = w.Write(append(body, '\n'))
}

// headers sets the rate-limit fields of res's decision, the failure mode
// that answered instead of the store (none when degraded is "") and the
// Content-Type on hdr, under their canonical keys, their values in one
// array.
func (h *Handler) headers(hdr http.Header, res *engine.Result, degraded string) {
	var f ratelimitfields.Fields
	if d := &res.Decision; d.Limited() {
		at := h.now()
		if b := d.Bound(); b.At != 0 {
			at = time.UnixMicro(b.At)
		}
		f = h.formatter.Format(d, res.Degraded, at)
	}
	vals := make([]string, f.N+2)
	set := func(i int, key, v string) {
		vals[i] = v
		hdr[key] = vals[i : i+1 : i+1]
	}
	for i := range f.N {
		set(i, fieldfmt.CanonicalKeys[f.Field[i]], f.Value[i])
	}
	if degraded != "" {
		set(f.N, engine.DegradedHeader, degraded)
	}
	set(f.N+1, "Content-Type", "application/json")
}

// problemBody is an RFC 9457 problem details object; Field names the
// request field at fault, and Errors lists it with what is wrong with it
// (the shape of every problem of ratelimitd's HTTP APIs).
type problemBody struct {
	Type   string            `json:"type"`
	Title  string            `json:"title"`
	Status int               `json:"status"`
	Detail string            `json:"detail"`
	Field  string            `json:"field,omitempty"`
	Errors []core.FieldError `json:"errors,omitempty"`
}

// writeProblem answers e as application/problem+json.
func writeProblem(w http.ResponseWriter, r *http.Request, e *failure) {
	b := problemBody{Type: "about:blank", Title: e.title, Status: e.status, Detail: e.detail}
	if e.field != nil {
		b.Detail, b.Field, b.Errors = e.field.Error(), e.field.Field, []core.FieldError{*e.field}
	}
	problem.Write(w, r, e.status, b)
}

// isJSON reports whether a Content-Type is JSON (application/json or any
// application/*+json, with parameters).
func isJSON(ct string) bool {
	if ct == "application/json" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")
}

// clip bounds a client-supplied string quoted back in an error.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
