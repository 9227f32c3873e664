package openapitest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/sluicehq/sluice/service/openapi"
)

// scope is the prefix of the paths the document describes.
const scope = "/api/v1/"

// checkPath is the check API's path (httpapi.Path; this package imports no
// server package, so that their own tests can use it).
const checkPath = "/api/v1/rate-limit/check"

// Validator checks exchanges against the OpenAPI document. It is safe for
// concurrent use. Build one with New.
type Validator struct {
	doc      *openapi3.T
	compiled *compiled
	mux      *http.ServeMux
}

// loaded is the Validator of the embedded document, built once per test
// binary: loading and validating the document takes a fifth of a second,
// and the Validator is never changed after it is built.
var loaded = sync.OnceValues(func() (*Validator, error) { return load(openapi.Document()) })

// New returns the Validator of the document (loaded and validated as
// OpenAPI 3.1 on the first call); a document that does not load or
// validate fails tb.
func New(tb testing.TB) *Validator {
	tb.Helper()
	v, err := loaded()
	if err != nil {
		tb.Fatalf("openapitest: %v", err)
	}
	return v
}

// load builds the Validator of the JSON document b.
func load(b []byte) (*Validator, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(b)
	if err != nil {
		return nil, fmt.Errorf("loading the document: %w", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		return nil, fmt.Errorf("the document is OpenAPI %s, not 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("the document is invalid: %w", err)
	}
	// The servers' host is no part of matching: the tests listen on
	// ports the kernel picks.
	doc.Servers = nil
	cs, err := compile(doc, b)
	if err != nil {
		return nil, fmt.Errorf("compiling the document's responses: %w", err)
	}
	v := &Validator{doc: doc, compiled: cs, mux: http.NewServeMux()}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			rt := &routers.Route{Spec: doc, Path: path, PathItem: item, Method: method, Operation: op}
			names := wildcards(path)
			v.mux.HandleFunc(method+" "+path, func(_ http.ResponseWriter, r *http.Request) {
				m, _ := r.Context().Value(matchKey{}).(*match)
				if m == nil {
					return
				}
				m.route, m.params = rt, map[string]string{}
				for _, n := range names {
					m.params[n] = r.PathValue(n)
				}
			})
		}
	}
	return v, nil
}

var wildcard = regexp.MustCompile(`\{([^}]+)\}`)

// wildcards are the names of a path template's parameters.
func wildcards(path string) []string {
	var out []string
	for _, m := range wildcard.FindAllStringSubmatch(path, -1) {
		out = append(out, m[1])
	}
	return out
}

type matchKey struct{}

// match is what routing a request found: its route and path parameters,
// or the status net/http's mux answers (404, 405) when none.
type match struct {
	route  *routers.Route
	params map[string]string
	status int
}

// find routes r as ratelimitd's mux does (the same ServeMux patterns, so
// the same escaping and wildcard rules).
func (v *Validator) find(r *http.Request) *match {
	m := &match{}
	rec := &statusOnly{header: http.Header{}}
	v.mux.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), matchKey{}, m)))
	if m.route == nil {
		m.status = rec.status
	}
	return m
}

// statusOnly is a ResponseWriter keeping only the status.
type statusOnly struct {
	header http.Header
	status int
}

func (s *statusOnly) Header() http.Header         { return s.header }
func (s *statusOnly) Write(b []byte) (int, error) { return len(b), nil }
func (s *statusOnly) WriteHeader(code int)        { s.status = code }

// exchange is one request and its response, as the client sent and got
// them.
type exchange struct {
	req     *http.Request
	reqBody []byte
	status  int
	header  http.Header
	body    []byte
}

// Check validates one exchange: nil when it matches the document.
func (v *Validator) check(ctx context.Context, x *exchange) error {
	if !strings.HasPrefix(x.req.URL.Path, scope) {
		return nil
	}
	m := v.find(x.req)
	if m.route == nil {
		return v.unrouted(x, m.status)
	}
	in := &openapi3filter.RequestValidationInput{
		Request:    requestWithBody(x.req, x.reqBody),
		PathParams: m.params,
		Route:      m.route,
		Options: &openapi3filter.Options{
			AuthenticationFunc: bearerPresent,
			MultiError:         true,
			ExcludeRequestBody: m.route.Path == checkPath && proxied(x.req),
		},
	}
	// A request the server refused (4xx) may be valid or not: only one it
	// did not refuse must be one the document accepts.
	if x.status < 400 || x.status > 499 {
		if err := openapi3filter.ValidateRequest(ctx, in); err != nil {
			return fmt.Errorf("the server answered %d to a request the document refuses: %w", x.status, err)
		}
	}
	if err := v.compiled.validate(m.route.Method, m.route.Path, x); err != nil {
		return fmt.Errorf("%s %s: the response (%d) does not match operation %s: %w",
			m.route.Method, m.route.Path, x.status, m.route.Operation.OperationID, err)
	}
	return nil
}

// unrouted checks the answer to a request the document has no operation
// for: 404 for a path it does not have, 405 with Allow for a method it
// does not list; a problem+json body must be one of its problems.
func (v *Validator) unrouted(x *exchange, routed int) error {
	if x.status != routed {
		return fmt.Errorf("%s %s: no operation of the document: want %d, the server answered %d", x.req.Method, x.req.URL.Path, routed, x.status)
	}
	if routed == http.StatusMethodNotAllowed && x.header.Get("Allow") == "" {
		return fmt.Errorf("%s %s: 405 without Allow", x.req.Method, x.req.URL.Path)
	}
	if !strings.HasPrefix(x.header.Get("Content-Type"), "application/problem+json") {
		return nil
	}
	name := "Problem"
	if x.req.URL.Path == checkPath {
		name = "CheckProblem"
	}
	return v.schema(name, x.body)
}

// schema validates body (JSON) against the document's schema name.
func (v *Validator) schema(name string, body []byte) error {
	s := v.compiled.schemas[name]
	if s == nil {
		return fmt.Errorf("the document has no schema %s", name)
	}
	if err := validateJSON(s, body); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// bearerPresent is the document's bearerAuth as far as a schema can tell:
// an Authorization field with a Bearer token. Whether the token is valid
// is the server's to say (401).
func bearerPresent(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	if in.SecurityScheme == nil || !strings.EqualFold(in.SecurityScheme.Scheme, "bearer") {
		return fmt.Errorf("unexpected security scheme %s", in.SecuritySchemeName)
	}
	vs := in.RequestValidationInput.Request.Header.Values("Authorization")
	if len(vs) != 1 {
		return errors.New("want one Authorization field")
	}
	scheme, token, ok := strings.Cut(vs[0], " ")
	if !ok || !strings.EqualFold(scheme, "bearer") || strings.TrimSpace(token) == "" {
		return errors.New("Authorization is not a Bearer token")
	}
	return nil
}

// proxied reports whether a check's query or headers name the key: the
// check API then ignores the body (see httpapi).
func proxied(r *http.Request) bool {
	q := r.URL.Query()
	return q.Has("key_type") || q.Has("key_value") || r.Header.Get("Sluice-Key-Type") != "" || r.Header.Get("Sluice-Key-Value") != ""
}

// requestWithBody is a shallow copy of r reading body.
func requestWithBody(r *http.Request, body []byte) *http.Request {
	c := r.Clone(r.Context())
	c.Body = io.NopCloser(bytes.NewReader(body))
	c.ContentLength = int64(len(body))
	return c
}
