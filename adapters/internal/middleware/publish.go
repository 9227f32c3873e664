package middleware

import (
	"net/http"

	"github.com/sluicehq/sluice/adapters/internal/httpfields"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/fieldfmt"
)

// PublishHTTP sets the fields of d, formatted by f, on h and returns req
// carrying d in its context (httpfields.DecisionFrom), for the adapters
// built on net/http. When d is s's own Decision, the values and the
// request live in s: no allocation. A merged Decision (Merge, stacked
// middlewares) takes a few.
func PublishHTTP(s *httpfields.Scratch, f *fieldfmt.Formatter, h http.Header, req *http.Request, d *core.Decision) *http.Request {
	if d == &s.Decision {
		s.SetHeaders(f, h, f.Now(d))
		return s.Request(req)
	}
	fields, _ := f.Append(nil, d, f.Now(d))
	for i := range fields.N {
		h[fieldfmt.CanonicalKeys[fields.ID[i]]] = []string{fields.Value[i]}
	}
	return req.WithContext(httpfields.NewContext(req.Context(), d))
}

// ProblemFor is the problem+json body of a denial: that of d, or
// ProblemBody when the denied handler found no Decision (ok false: called
// outside the middleware).
func ProblemFor(d *core.Decision, ok bool) []byte {
	if !ok {
		return []byte(ProblemBody)
	}
	return fieldfmt.Problem(d)
}

// DecisionOf is v as a Decision, for the adapters that keep it in the
// framework's per-request store (gin's c.Get, Echo's c.Get, Fiber's
// c.Locals): ok is false when v is none.
func DecisionOf(v any) (d *core.Decision, ok bool) {
	d, ok = v.(*core.Decision)
	return d, ok
}
