package httpapi

import (
	"encoding/json"
	"math"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/engine"
)

// answerBody is the Response of a check without pointers: what it is
// written from (a Response's pointers would put its values on the heap).
type answerBody struct {
	allowed          bool
	limit, remaining int64
	resetAt          time.Time
	reset            bool // resetAt is set (else reset_at is null)
	retry            float64
	never            bool // the check can never pass: retry_after is null
	rule, state      string
	degraded         string
}

// response is a as a Response.
func (a *answerBody) response() Response {
	r := Response{Allowed: a.allowed, Limit: a.limit, Remaining: a.remaining, Rule: a.rule, State: a.state, Degraded: a.degraded}
	if a.reset {
		at := a.resetAt
		r.ResetAt = &at
	}
	if !a.never {
		retry := a.retry
		r.RetryAfter = &retry
	}
	return r
}

// appendAnswer appends a as json.Marshal writes its Response (Response's
// MarshalJSON), without its reflection: the names and values of a check's
// answer are few and known, so that a body costs no allocation of its own.
// A string that would need escaping (none of the rule IDs, states and
// failure modes a check answers with does), a reset beyond year 9999 or a
// wait that is no number are left to json.Marshal.
func appendAnswer(b []byte, a *answerBody) []byte {
	if !plain(a.rule) || !plain(a.state) || !plain(a.degraded) || a.reset && !jsonYear(a.resetAt) ||
		!a.never && (math.IsNaN(a.retry) || math.IsInf(a.retry, 0)) {
		out, _ := json.Marshal(a.response()) // no body when it cannot be written, as before
		return append(b, out...)
	}
	// No counter was read: remaining is null, written after the other
	// fields (MarshalJSON's embedding).
	unchecked := a.degraded == engine.DegradedName(core.FailedOpen) || a.degraded == engine.DegradedName(core.FailedClosed)
	b = append(b, `{"allowed":`...)
	b = strconv.AppendBool(b, a.allowed)
	b = append(b, `,"limit":`...)
	b = strconv.AppendInt(b, a.limit, 10)
	if !unchecked {
		b = append(b, `,"remaining":`...)
		b = strconv.AppendInt(b, a.remaining, 10)
	}
	b = append(b, `,"reset_at":`...)
	if a.reset {
		b = append(b, '"')
		b = a.resetAt.AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"retry_after":`...)
	if a.never {
		b = append(b, "null"...)
	} else {
		b = appendFloat(b, a.retry)
	}
	b = append(b, `,"rule":"`...)
	b = append(b, a.rule...)
	b = append(b, `","state":"`...)
	b = append(b, a.state...)
	b = append(b, '"')
	if a.degraded != "" {
		b = append(b, `,"degraded":"`...)
		b = append(b, a.degraded...)
		b = append(b, '"')
	}
	if unchecked {
		b = append(b, `,"remaining":null`...)
	}
	return append(b, '}')
}

// appendFloat appends f as encoding/json writes a float64: the shortest
// decimal that reads back as f, in exponent form below 1e-6 and from 1e21
// on (with an exponent of at least two digits only when it needs them).
func appendFloat(b []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// plain reports whether s is written in JSON as it is: printable ASCII
// that encoding/json neither escapes nor replaces.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// jsonYear reports whether t's year is one RFC 3339 can write (time.Time's
// MarshalJSON fails outside it).
func jsonYear(t time.Time) bool { return t.Year() >= 0 && t.Year() <= 9999 }
