package engine

import (
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/ratelimitfields"
)

// DegradedHeader is the HTTP header field (and, in lower case, the gRPC
// metadata key and the Envoy response header) in which every front door
// says that the limiter could not decide on its store: its value is
// DegradedName of the failure mode that answered instead.
const DegradedHeader = "Sluice-Degraded"

// degraded returns the failure mode that answered some rule of d instead
// of the store (core.FailedOpen, core.FailedClosed or core.FromFallback,
// under a guard: core/guard), or core.FromStore when the store decided
// every rule (a deny cache's answer repeats the store's: not degraded).
func degraded(d *core.Decision) core.Source {
	for i := range d.Results {
		if s := d.Results[i].Source; s.Degraded() {
			return s
		}
	}
	return core.FromStore
}

// DegradedName is the name every front door gives a Result's (or a
// DescriptorsResult's) Degraded: "fail_open" (allowed unchecked: no
// counter was read), "fail_closed" (denied unchecked: no counter was read
// either), "fallback" (a local limiter decided, on its share of the
// limit), or "" when the store decided.
func DegradedName(s core.Source) string {
	switch s {
	case core.FailedOpen:
		return "fail_open"
	case core.FailedClosed:
		return "fail_closed"
	case core.FromFallback:
		return "fallback"
	}
	return ""
}

// Unchecked reports whether s is a failure mode that read no counter (fail
// open or fail closed): the answer states the rule's limit, but no
// remaining or reset.
func Unchecked(s core.Source) bool { return s == core.FailedOpen || s == core.FailedClosed }

// FieldsFor returns the rate-limit fields to send with a decision whose
// Degraded is s: c, but only Retry-After when the guard failed closed (it
// denied without applying the rule's limit, which the other fields would
// state). A decision that failed open has no fields whatever c says
// (ratelimitfields omits them: the quota is unknown).
func FieldsFor(c ratelimitfields.Config, s core.Source) ratelimitfields.Config {
	if s == core.FailedClosed {
		c.Omit |= ratelimitfields.Draft | ratelimitfields.XRateLimit | ratelimitfields.State
	}
	return c
}
