package openapitest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Responses are validated against JSON Schemas compiled once, when the
// document is loaded, with the JSON Schema 2020-12 validator kin-openapi
// itself uses for OpenAPI 3.1 documents: kin-openapi's ValidateResponse
// compiles every schema again for every value it validates, a few
// milliseconds an exchange (tens under the race detector), which the
// suites that send thousands of requests cannot afford.

// docURL names the document as the schemas' resource.
const docURL = "mem:///openapi.json"

// response is what the document says of one status of one operation.
type response struct {
	// content maps a media type to its body's schema (nil: any body).
	content map[string]*jsonschema.Schema
	headers []header
}

type header struct {
	name     string
	required bool
	schema   *jsonschema.Schema
}

// compiled holds the compiled responses of every operation, by
// "METHOD path" and status ("default" too), and the component schemas
// named by name.
type compiled struct {
	ops     map[string]map[string]*response
	schemas map[string]*jsonschema.Schema
}

// compile compiles every response of doc (the document as JSON, raw).
func compile(doc *openapi3.T, raw []byte) (*compiled, error) {
	tree, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource(docURL, tree); err != nil {
		return nil, err
	}
	out := &compiled{ops: map[string]map[string]*response{}, schemas: map[string]*jsonschema.Schema{}}
	for name := range doc.Components.Schemas {
		s, err := c.Compile(docURL + "#/components/schemas/" + escape(name))
		if err != nil {
			return nil, fmt.Errorf("schema %s: %w", name, err)
		}
		out.schemas[name] = s
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			rs := map[string]*response{}
			for code, ref := range op.Responses.Map() {
				at := "#/paths/" + escape(path) + "/" + strings.ToLower(method) + "/responses/" + code
				r, err := compileResponse(c, ref, at)
				if err != nil {
					return nil, fmt.Errorf("%s %s %s: %w", method, path, code, err)
				}
				rs[code] = r
			}
			out.ops[method+" "+path] = rs
		}
	}
	return out, nil
}

// compileResponse compiles the response ref, found at pointer at (or at
// the component it refers to).
func compileResponse(c *jsonschema.Compiler, ref *openapi3.ResponseRef, at string) (*response, error) {
	if ref.Ref != "" {
		at = ref.Ref
	}
	r := &response{content: map[string]*jsonschema.Schema{}}
	for mt := range ref.Value.Content {
		s, err := c.Compile(docURL + at + "/content/" + escape(mt) + "/schema")
		if err != nil {
			return nil, err
		}
		r.content[mt] = s
	}
	names := make([]string, 0, len(ref.Value.Headers))
	for name := range ref.Value.Headers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		h := ref.Value.Headers[name]
		hat := at + "/headers/" + escape(name)
		if h.Ref != "" {
			hat = h.Ref
		}
		s, err := c.Compile(docURL + hat + "/schema")
		if err != nil {
			return nil, err
		}
		r.headers = append(r.headers, header{name: name, required: h.Value.Required, schema: s})
	}
	return r, nil
}

// escape is s as a JSON Pointer token.
func escape(s string) string { return strings.NewReplacer("~", "~0", "/", "~1").Replace(s) }

// validate checks a response of the operation "METHOD path" (method as
// routed: HEAD has operations of its own).
func (c *compiled) validate(method, path string, x *exchange) error {
	rs := c.ops[method+" "+path]
	r := rs[strconv.Itoa(x.status)]
	if r == nil {
		r = rs["default"]
	}
	if r == nil {
		return fmt.Errorf("status %d is not one the operation answers", x.status)
	}
	var errs []error
	for _, h := range r.headers {
		vs := x.header.Values(h.name)
		switch {
		case len(vs) == 0 && h.required:
			errs = append(errs, fmt.Errorf("header %s: required, missing", h.name))
		case len(vs) > 1:
			errs = append(errs, fmt.Errorf("header %s: given %d times", h.name, len(vs)))
		case len(vs) == 1:
			if err := h.schema.Validate(vs[0]); err != nil {
				errs = append(errs, fmt.Errorf("header %s: %q: %w", h.name, vs[0], err))
			}
		}
	}
	if err := r.body(x); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// body checks x's Content-Type and body against r's content.
func (r *response) body(x *exchange) error {
	if x.req.Method == http.MethodHead {
		return nil // net/http sends no body, whatever a handler writes
	}
	if len(r.content) == 0 {
		if len(x.body) > 0 {
			return fmt.Errorf("a body (%d bytes) where the document describes none", len(x.body))
		}
		return nil
	}
	ct := x.header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return fmt.Errorf("Content-Type %q: %w", ct, err)
	}
	s, ok := r.content[mt]
	if !ok {
		return fmt.Errorf("Content-Type %q is not one the document gives this status", ct)
	}
	return validateJSON(s, x.body)
}

// validateJSON checks that body is one JSON value matching s.
func validateJSON(s *jsonschema.Schema, body []byte) error {
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return fmt.Errorf("the body is not JSON: %w", err)
	}
	if d.More() {
		return errors.New("the body holds more than one JSON value")
	}
	if err := s.Validate(v); err != nil {
		return fmt.Errorf("the body does not match the document: %w", err)
	}
	return nil
}
