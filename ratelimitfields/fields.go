package ratelimitfields

import (
	"iter"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/fieldfmt"
)

// Families is a set of field families, for Config.Omit.
type Families uint8

// The field families; all are sent unless omitted.
const (
	// Draft is RateLimit-Policy and RateLimit, as in
	// draft-ietf-httpapi-ratelimit-headers-10.
	Draft Families = 1 << iota
	// XRateLimit is X-RateLimit-Limit, -Remaining and -Reset.
	XRateLimit
	// RetryAfter is Retry-After on denied requests.
	RetryAfter
	// State is X-RateLimit-State, the warning signal.
	State
)

// ResetFormat is the unit of X-RateLimit-Reset.
type ResetFormat uint8

const (
	// ResetEpoch: the Unix time in seconds at which the key is fresh again
	// (GitHub's convention). The default.
	ResetEpoch ResetFormat = iota
	// ResetDelta: the seconds until then.
	ResetDelta
)

// Config says which fields to send. The zero value sends them all, with
// X-RateLimit-Reset in epoch seconds. A Config is a plain value, safe to
// copy and to use concurrently.
type Config struct {
	// Omit is the families not sent.
	Omit Families
	// Reset is the format of X-RateLimit-Reset.
	Reset ResetFormat
}

// Field is one rate-limit field. Its String is its name as an HTTP
// header; gRPC metadata uses the same name in lower case.
type Field uint8

// The fields, in the order they are sent.
const (
	FieldRateLimitPolicy Field = iota // RateLimit-Policy
	FieldRateLimit                    // RateLimit
	FieldLimit                        // X-RateLimit-Limit
	FieldRemaining                    // X-RateLimit-Remaining
	FieldReset                        // X-RateLimit-Reset
	FieldState                        // X-RateLimit-State
	FieldRetryAfter                   // Retry-After
)

// MaxFields is the number of fields: the most a Fields holds.
const MaxFields = 7

// String returns f's name as written on the wire by an HTTP adapter that
// keeps case ("RateLimit-Policy"), or "" for a value that is no field.
func (f Field) String() string {
	if int(f) >= MaxFields {
		return ""
	}
	return fieldfmt.Names[f]
}

// Fields is a formatted set of fields: Field[i] has Value[i], for i below
// N, in the order they are sent. The zero value is the empty set.
type Fields struct {
	N     int
	Field [MaxFields]Field
	Value [MaxFields]string
}

// All returns the fields and their values, in order.
func (f Fields) All() iter.Seq2[Field, string] {
	return func(yield func(Field, string) bool) {
		for i := range f.N {
			if !yield(f.Field[i], f.Value[i]) {
				return
			}
		}
	}
}

// Format returns the fields c selects of d at instant now (which only
// X-RateLimit-Reset in epoch seconds reads; sluice's adapters pass the
// instant the store decided at, the binding policy's Result.At, to which
// its ResetAfter is relative). All values share one
// allocation. A Decision no policy applied to, whose binding policy is a
// shadow, or that failed open has no fields.
func (c Config) Format(d *core.Decision, now time.Time) Fields {
	ff := fieldfmt.Format(c.spec(), d, now)
	f := Fields{N: ff.N, Value: ff.Value}
	for i := range ff.N {
		f.Field[i] = Field(ff.ID[i])
	}
	return f
}

// spec is c as the formatting code takes it.
func (c Config) spec() fieldfmt.Config {
	return fieldfmt.Config{Omit: uint8(c.Omit), Reset: uint8(c.Reset)}
}

// Problem returns the RFC 9457 application/problem+json body of a denied
// request: type quota-exceeded, with the policies that denied it. When a
// policy can never admit the request (its cost exceeds the capacity, or the
// request has no identity for a policy that requires one), the detail says
// so, no retry time is given, and the member "retry" is false. Each call
// returns a new slice.
func Problem(d *core.Decision) []byte { return fieldfmt.Problem(d) }

// ProblemContentType is the media type of Problem's body.
const ProblemContentType = "application/problem+json"

// Retry returns the wait of a denied Decision, after which a retry passes:
// that of its binding policy, the denying policy with the longest wait (a
// request passes only once every one of them admits it). never is true
// when that policy can never admit the request (its cost exceeds the
// capacity): no wait helps. Both are zero for an allowed Decision.
// Retry-After is wait in whole seconds, rounded up; gRPC's pushback and
// RetryInfo are wait in milliseconds.
func Retry(d *core.Decision) (wait time.Duration, never bool) { return fieldfmt.Retry(d) }
