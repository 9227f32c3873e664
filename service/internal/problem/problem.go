// Package problem writes RFC 9457 problem details (application/problem+json),
// the error answers of ratelimitd's HTTP APIs: Write sends any body with the
// headers every such answer carries; Details is the body of the admin API
// (adminapi and adminauth), whose errors name the fields at fault.
package problem

import (
	"encoding/json"
	"net/http"

	"github.com/sluicehq/sluice/core"
)

// ContentType is the media type of a problem details body.
const ContentType = "application/problem+json"

// Details is an RFC 9457 problem details object in the admin API's shape.
type Details struct {
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
	// Errors lists the fields at fault, each {"field", "message"}: a body
	// member ("window_seconds"), a query parameter ("limit"), a path
	// segment ("id") or a header field ("If-Match"); "body" for the body as
	// a whole.
	Errors []core.FieldError `json:"errors,omitempty"`
}

// New returns the Details of status for r: type about:blank, the given
// title and detail, r's path as the instance.
func New(r *http.Request, status int, title, detail string, errs ...core.FieldError) Details {
	return Details{Type: "about:blank", Title: title, Status: status, Detail: detail, Instance: r.URL.Path, Errors: errs}
}

// Write answers status with body (which must marshal to JSON) as
// application/problem+json, with X-Content-Type-Options: nosniff; the body
// is left out when r is a HEAD request. Headers set on w before stay.
func Write(w http.ResponseWriter, r *http.Request, status int, body any) {
	b, err := json.Marshal(body)
	if err != nil { // a programming error: every body is a plain struct
		b = []byte(`{"type":"about:blank","status":500}`)
	}
	h := w.Header()
	h.Set("Content-Type", ContentType)
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(append(b, '\n'))
	}
}
