package envoyrls

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/internal/badrequest"
	"github.com/sluicehq/sluice/service/internal/rawtext"
)

// MaxJSONBody bounds the body of a /json request.
const MaxJSONBody = 64 << 10

// JSONHandler returns the http.Handler of envoyproxy/ratelimit's /json
// endpoint, on the same decisions as ShouldRateLimit: POST a
// RateLimitRequest in proto3 JSON (the field names of the proto, in either
// spelling: "hits_addend" or "hitsAddend"), get the RateLimitResponse back in
// proto3 JSON, with status 200 when the overall code is OK and 429 when it
// is OVER_LIMIT. The response_headers_to_add are sent as HTTP headers too.
//
// Errors are RFC 9457 application/problem+json: 400 for a body that is not
// a RateLimitRequest (its detail says why, naming the field) or one
// ShouldRateLimit rejects, 405 for another method than POST, 413 for a body
// over MaxJSONBody, and 500 with a generic detail when no decision could be
// made (the cause is logged, never sent).
func (s *Server) JSONHandler() http.Handler {
	return http.HandlerFunc(s.serveJSON)
}

func (s *Server) serveJSON(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeProblem(w, http.StatusMethodNotAllowed, "method not allowed", "use POST with a RateLimitRequest in proto3 JSON")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxJSONBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeProblem(w, http.StatusRequestEntityTooLarge, "body too large",
				"body: larger than "+strconv.Itoa(MaxJSONBody)+" bytes")
			return
		}
		writeProblem(w, http.StatusBadRequest, "unreadable body", "body: could not be read")
		return
	}
	// protojson refuses invalid UTF-8 too; this names the field.
	if inv := rawtext.JSON(body, ""); inv != nil {
		writeProblem(w, http.StatusBadRequest, "invalid RateLimitRequest", inv.Error(), inv)
		return
	}
	var req rlsv3.RateLimitRequest
	if err := protojson.Unmarshal(body, &req); err != nil {
		writeProblem(w, http.StatusBadRequest, "invalid RateLimitRequest", "body: "+protojsonDetail(err))
		return
	}
	res, err := s.ShouldRateLimit(r.Context(), &req)
	if err != nil {
		if st, ok := status.FromError(err); ok && st.Code() == codes.InvalidArgument {
			writeProblem(w, http.StatusBadRequest, "invalid RateLimitRequest", st.Message(), badrequest.Fields(st)...)
			return
		}
		writeProblem(w, http.StatusInternalServerError, "no decision", "the rate limit decision could not be made")
		return
	}
	out, err := protojson.Marshal(res)
	if err != nil { // a response built here always marshals
		writeProblem(w, http.StatusInternalServerError, "no decision", "the rate limit decision could not be made")
		return
	}
	h := w.Header()
	for _, hv := range res.GetResponseHeadersToAdd() {
		h.Add(hv.GetKey(), hv.GetValue())
	}
	h.Set("Content-Type", "application/json")
	code := http.StatusOK
	if res.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
		code = http.StatusTooManyRequests
	}
	w.WriteHeader(code)
	_, _ = w.Write(out)
}

// protojsonDetail returns protojson's message without its "proto:" prefix,
// cut to a bounded length (it quotes the client's own input only).
func protojsonDetail(err error) string {
	m := strings.TrimSpace(strings.TrimPrefix(err.Error(), "proto:"))
	m = strings.ReplaceAll(m, "\u00a0", " ") // protojson separates with a non-breaking space at random
	if len(m) > 200 {
		m = m[:200] + "..."
	}
	return m
}

// problem is an RFC 9457 problem details object; Errors lists the fields
// at fault, each {"field", "message"}, as every problem of ratelimitd's
// HTTP APIs does.
type problem struct {
	Type   string            `json:"type"`
	Title  string            `json:"title"`
	Status int               `json:"status"`
	Detail string            `json:"detail"`
	Errors []core.FieldError `json:"errors,omitempty"`
}

// writeProblem answers with an application/problem+json body naming the
// fields at fault, if any.
func writeProblem(w http.ResponseWriter, code int, title, detail string, fields ...*core.FieldError) {
	p := problem{Type: "about:blank", Title: title, Status: code, Detail: detail}
	for _, fe := range fields {
		p.Errors = append(p.Errors, *fe)
	}
	b, _ := json.Marshal(p)
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}
