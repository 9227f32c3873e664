package fieldfmt

import (
	"fmt"
	"strconv"

	"github.com/sluicehq/sluice/core"
)

// ProblemContentType is the media type of Problem's body.
const ProblemContentType = "application/problem+json"

// problemHead opens every problem+json body sluice writes.
const problemHead = `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429`

// UnknownProblem is the problem+json body of a denial whose Decision is
// unknown (a denied handler called outside the middleware): Problem's
// without the detail and the policies.
const UnknownProblem = problemHead + "}\n"

// Problem returns the RFC 9457 application/problem+json body of a denied
// request (ratelimitfields.Problem).
func Problem(d *core.Decision) []byte {
	wait, never := Retry(d)
	out := make([]byte, 0, 256)
	out = append(out, problemHead+`,"detail":"`...)
	switch unidentified := firstUnidentified(d); {
	case unidentified != nil:
		out = append(out, `The request has no identity for policy \"`...)
		out = append(out, unidentified.Policy...)
		out = append(out, `\" (a missing key); it cannot succeed without one: do not retry it as it is.`...)
	case never:
		out = append(out, "The request costs more than the limit allows at once; it can never succeed: do not retry it."...)
	default:
		out = append(out, "Rate limit exceeded; retry in "...)
		out = append(AppendSeconds(out, Seconds(wait)), '.')
	}
	out = append(out, `","violated-policies":[`...)
	n := 0
	for _, p := range d.Results {
		if p.Allowed || p.Shadow {
			continue
		}
		if n > 0 {
			out = append(out, ',')
		}
		n++
		out = append(out, '"')
		out = append(out, p.Policy...) // policy names are validated: no escaping needed
		out = append(out, '"')
	}
	out = append(out, ']')
	if never {
		out = append(out, `,"retry":false`...)
	}
	return append(out, "}\n"...)
}

// AppendSeconds appends n seconds in words to out: "1 second", "n seconds".
func AppendSeconds(out []byte, n int64) []byte {
	out = strconv.AppendInt(out, n, 10)
	if n == 1 {
		return append(out, " second"...)
	}
	return append(out, " seconds"...)
}

// firstUnidentified returns the first policy that denied d because the
// request had no identity for it (its MissingKey is DenyRequest), or nil.
func firstUnidentified(d *core.Decision) *core.PolicyResult {
	for i := range d.Results {
		if p := &d.Results[i]; p.Unidentified && !p.Allowed && !p.Shadow {
			return p
		}
	}
	return nil
}

// Violation returns the text that says why policy p denied a request, as
// gRPC's QuotaFailure violations carry it: "10 per 1m0s (token_bucket)
// exceeded", or that the request has no identity for p, or that its cost
// exceeds p's capacity.
func Violation(p *core.PolicyResult) string {
	switch {
	case p.Unidentified:
		return "no identity for this policy (a missing key); the call cannot be admitted without one"
	case p.Never():
		return fmt.Sprintf("cost exceeds the capacity %d; the call can never be admitted", p.Capacity)
	}
	// p.Limit is the limit applied: an override's or a tier's.
	return fmt.Sprintf("%d per %s (%s) exceeded", p.Limit.Rate, p.Limit.Period, p.Limit.Algorithm)
}
