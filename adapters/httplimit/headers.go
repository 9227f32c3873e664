package httplimit

import (
	"math"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/core"
)

// Header names, as written on the wire by adapters that keep case.
const (
	HeaderRateLimitPolicy = "RateLimit-Policy"
	HeaderRateLimit       = "RateLimit"
	HeaderLimit           = "X-RateLimit-Limit"
	HeaderRemaining       = "X-RateLimit-Remaining"
	HeaderReset           = "X-RateLimit-Reset"
	HeaderState           = "X-RateLimit-State"
	HeaderRetryAfter      = "Retry-After"
)

// Families is a set of header families.
type Families uint8

// The header families; all are written unless omitted.
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

// HeaderConfig says which headers to write. The zero value writes them all,
// with X-RateLimit-Reset in epoch seconds.
type HeaderConfig struct {
	Omit  Families
	Reset ResetFormat
}

// Fields is a formatted set of header fields; Name[i] has Value[i].
type Fields struct {
	N     int
	Name  [7]string
	Value [7]string
}

// sfMax is the largest Integer of RFC 9651 Structured Fields (15 digits).
const sfMax = 999_999_999_999_999

// Format returns the header fields of d at instant now. All values share one
// allocation.
func (c HeaderConfig) Format(d *core.Decision, now time.Time) Fields {
	var buf [512]byte
	var fb fieldsBuilder
	out := fb.format(c, nil, d, now, buf[:0])
	var f Fields
	if fb.n == 0 {
		return f
	}
	all := string(out)
	f.N = fb.n
	for i := range fb.n {
		f.Name[i], f.Value[i] = fieldNames[fb.id[i]], fb.value(i, all)
	}
	return f
}

// A field is one of the header fields, in the order they are written.
type field uint8

const (
	fieldPolicy field = iota
	fieldRateLimit
	fieldLimit
	fieldRemaining
	fieldReset
	fieldState
	fieldRetryAfter
	numFields
)

// fieldNames and fieldKeys are the names of the fields as written on the
// wire and as http.Header keys (canonical).
var (
	fieldNames = [numFields]string{HeaderRateLimitPolicy, HeaderRateLimit, HeaderLimit, HeaderRemaining, HeaderReset, HeaderState, HeaderRetryAfter}
	fieldKeys  = [numFields]string{"Ratelimit-Policy", "Ratelimit", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "X-Ratelimit-State", "Retry-After"}
)

// fieldsBuilder records the fields of one response: each value is either
// a string already (a constant or cached text) or a span of the buffer
// format appends to, read once the buffer is complete.
type fieldsBuilder struct {
	n          int
	id         [numFields]field
	set        [numFields]string
	start, end [numFields]int32 // the span of field i when set[i] is ""
}

// put adds field id whose value is v (not empty).
func (fb *fieldsBuilder) put(id field, v string) {
	fb.id[fb.n], fb.set[fb.n] = id, v
	fb.n++
}

// span adds field id whose value is out[from:to].
func (fb *fieldsBuilder) span(id field, from, to int) {
	fb.id[fb.n], fb.start[fb.n], fb.end[fb.n] = id, int32(from), int32(to)
	fb.n++
}

// value returns the value of field i, all being the final buffer.
func (fb *fieldsBuilder) value(i int, all string) string {
	if v := fb.set[i]; v != "" {
		return v
	}
	return all[fb.start[i]:fb.end[i]]
}

// format appends to out the values of d's header fields that are not
// constant or in fm's cache (fm may be nil), records every field in fb and
// returns out.
func (fb *fieldsBuilder) format(c HeaderConfig, fm *Formatter, d *core.Decision, now time.Time, out []byte) []byte {
	if len(d.Results) == 0 {
		return out
	}
	var b *core.PolicyResult
	if d.Binding < len(d.Results) {
		b = &d.Results[d.Binding]
	} else {
		bound := d.Bound()
		b = &bound
	}
	if b.Shadow { // shadow policies are trials: clients do not see them
		return out
	}
	if b.Source == core.FailedOpen { // the store failed: the quota is unknown
		return out
	}
	// The cached text of the binding policy, and of the first visible one
	// while its item is not copied (the whole value if it is the only one).
	var bt, only *policyText
	rFrom, rTo := 0, 0 // the digits of Remaining, when written already
	if c.Omit&Draft == 0 {
		n, from := 0, len(out)
		for i := range d.Results {
			p := &d.Results[i]
			if p.Shadow {
				continue
			}
			t := fm.text(p)
			if i == d.Binding {
				bt = t
			}
			if n++; n == 1 {
				if only = t; t == nil {
					out = appendItem(out, p)
				}
				continue
			}
			if only != nil {
				out = append(out, only.item...)
				only = nil
			}
			out = append(out, ", "...)
			if t != nil {
				out = append(out, t.item...)
			} else {
				out = appendItem(out, p)
			}
		}
		if only != nil {
			fb.put(fieldPolicy, only.item)
		} else {
			fb.span(fieldPolicy, from, len(out))
		}
		from = len(out)
		out = append(out, '"')
		out = append(out, b.Policy...)
		out = append(out, `";r=`...)
		rFrom = len(out)
		out = strconv.AppendInt(out, min(b.Remaining, sfMax), 10)
		if b.Remaining <= sfMax {
			rTo = len(out)
		}
		out = append(out, ";t="...)
		out = strconv.AppendInt(out, min(seconds(untilMore(b.Result)), sfMax), 10)
		fb.span(fieldRateLimit, from, len(out))
	}
	if c.Omit&XRateLimit == 0 {
		if bt == nil {
			bt = fm.text(b)
		}
		if bt != nil {
			fb.put(fieldLimit, bt.limit)
		} else {
			from := len(out)
			out = strconv.AppendInt(out, b.Result.Limit, 10)
			fb.span(fieldLimit, from, len(out))
		}
		if rTo == 0 {
			rFrom = len(out)
			out = strconv.AppendInt(out, b.Remaining, 10)
			rTo = len(out)
		}
		fb.span(fieldRemaining, rFrom, rTo) // RateLimit's r when they are equal
		from := len(out)
		reset := seconds(b.ResetAfter)
		if c.Reset == ResetEpoch {
			reset = seconds(time.Duration(now.UnixNano()%1e9)+b.ResetAfter) + now.Unix()
		}
		out = strconv.AppendInt(out, reset, 10)
		fb.span(fieldReset, from, len(out))
	}
	if c.Omit&State == 0 {
		fb.put(fieldState, d.State().String())
	}
	if c.Omit&RetryAfter == 0 && !d.Allowed && !b.Never() {
		from := len(out)
		out = strconv.AppendInt(out, seconds(b.RetryAfter), 10)
		fb.span(fieldRetryAfter, from, len(out))
	}
	return out
}

// appendItem appends p's member of RateLimit-Policy.
func appendItem(out []byte, p *core.PolicyResult) []byte {
	out = append(out, '"')
	out = append(out, p.Policy...)
	out = append(out, `";q=`...)
	out = strconv.AppendInt(out, min(p.Result.Limit, sfMax), 10) // the capacity applied (an override's, if any)
	out = append(out, ";w="...)
	return strconv.AppendInt(out, window(p.Limit), 10)
}

// untilMore is the t of RateLimit: when denied, the wait until this request
// would pass (so Retry-After == t); when allowed, until the quota is whole.
func untilMore(r core.Result) time.Duration {
	if !r.Allowed && !r.Never() {
		return r.RetryAfter
	}
	return r.ResetAfter
}

// window is w of RateLimit-Policy: the seconds in which the capacity is
// restored.
func window(l core.Limit) int64 {
	d := l.Period
	if l.Algorithm.Bucket() && l.Capacity() != l.Rate {
		d = time.Duration(float64(l.Period) * float64(l.Capacity()) / float64(l.Rate))
	}
	return max(seconds(d), 1)
}

// seconds rounds d up to whole seconds (delay-seconds never round down: a
// client told 0 while limited would spin).
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	if d > math.MaxInt64-time.Second {
		return int64(math.MaxInt64 / time.Second)
	}
	return int64((d + time.Second - 1) / time.Second)
}

// Problem returns the RFC 9457 application/problem+json body of a denied
// request: type quota-exceeded, with the policies that denied it.
func Problem(d *core.Decision) []byte {
	b := d.Bound()
	out := make([]byte, 0, 256)
	out = append(out, `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"`...)
	if b.Never() {
		out = append(out, "The request costs more than the limit allows; it cannot succeed."...)
	} else {
		out = append(out, "Rate limit exceeded; retry in "...)
		out = strconv.AppendInt(out, seconds(b.RetryAfter), 10)
		out = append(out, " seconds."...)
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
	return append(out, "]}\n"...)
}

// ProblemContentType is the media type of Problem's body.
const ProblemContentType = "application/problem+json"
