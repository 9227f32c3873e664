package middleware

import (
	"net/http"
	"runtime"
	"strings"

	"github.com/sluicehq/sluice/internal/fieldfmt"
	"github.com/sluicehq/sluice/ratelimitfields"
)

// ProblemBody is the problem+json body of a denial whose Decision is
// unknown (a denied handler called outside the middleware).
const ProblemBody = fieldfmt.UnknownProblem

// Problem is a problem+json body carried as the message of a framework's
// error (Echo's *echo.HTTPError): it marshals to Body and records that it
// was marshaled, so that only a response carrying it is labelled
// application/problem+json. Its String is "Too Many Requests".
type Problem struct {
	Body      []byte
	Marshaled bool
}

// MarshalJSON returns p.Body and records that it was marshaled.
func (p *Problem) MarshalJSON() ([]byte, error) { p.Marshaled = true; return p.Body, nil }

func (p *Problem) String() string { return http.StatusText(http.StatusTooManyRequests) }

// CalledFrom reports whether a function whose qualified name ends with
// suffix ("/echo/v4.(*Echo).DefaultHTTPErrorHandler") is among its
// callers, up to 64 frames deep.
func CalledFrom(suffix string) bool {
	var pcs [64]uintptr
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs[:])])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, suffix) {
			return true
		}
		if !more {
			return false
		}
	}
}

// Label sets, on the header h of a response with status being written,
// Cache-Control: no-store (unless set) when it is a 429, and the
// problem+json Content-Type when p was marshaled into the body (or the
// request is a HEAD: no body) by the function named writer (a suffix of
// its qualified name, as CalledFrom takes): a framework's own error
// handler, which writes p as it is, where a custom one may write anything.
// Call it from the framework's before-write hook.
func (p *Problem) Label(h http.Header, status int, head bool, writer string) {
	if status != http.StatusTooManyRequests {
		return
	}
	if h.Get("Cache-Control") == "" {
		h.Set("Cache-Control", "no-store")
	}
	if (p.Marshaled || head) && CalledFrom(writer) {
		h.Set("Content-Type", ratelimitfields.ProblemContentType)
	}
}
