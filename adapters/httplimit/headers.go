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
	var f Fields
	b := d.Bound()
	if len(d.Results) == 0 || b.Shadow { // shadow policies are trials: clients do not see them
		return f
	}
	var buf [512]byte
	out := buf[:0]
	var ends [7]int
	add := func(name string) {
		f.Name[f.N] = name
		ends[f.N] = len(out)
		f.N++
	}
	if c.Omit&Draft == 0 {
		n := 0
		for _, p := range d.Results {
			if p.Shadow {
				continue
			}
			if n++; n > 1 {
				out = append(out, ", "...)
			}
			out = append(out, '"')
			out = append(out, p.Policy...)
			out = append(out, `";q=`...)
			out = strconv.AppendInt(out, min(p.Result.Limit, sfMax), 10) // the capacity applied (an override's, if any)
			out = append(out, ";w="...)
			out = strconv.AppendInt(out, window(p.Limit), 10)
		}
		add(HeaderRateLimitPolicy)
		out = append(out, '"')
		out = append(out, b.Policy...)
		out = append(out, `";r=`...)
		out = strconv.AppendInt(out, min(b.Remaining, sfMax), 10)
		out = append(out, ";t="...)
		out = strconv.AppendInt(out, min(seconds(untilMore(b.Result)), sfMax), 10)
		add(HeaderRateLimit)
	}
	if c.Omit&XRateLimit == 0 {
		out = strconv.AppendInt(out, b.Result.Limit, 10)
		add(HeaderLimit)
		out = strconv.AppendInt(out, b.Remaining, 10)
		add(HeaderRemaining)
		reset := seconds(b.ResetAfter)
		if c.Reset == ResetEpoch {
			reset = seconds(time.Duration(now.UnixNano()%1e9)+b.ResetAfter) + now.Unix()
		}
		out = strconv.AppendInt(out, reset, 10)
		add(HeaderReset)
	}
	if c.Omit&State == 0 {
		out = append(out, d.State().String()...)
		add(HeaderState)
	}
	if c.Omit&RetryAfter == 0 && !d.Allowed && !b.Never() {
		out = strconv.AppendInt(out, seconds(b.RetryAfter), 10)
		add(HeaderRetryAfter)
	}
	all := string(out)
	start := 0
	for i := range f.N {
		f.Value[i] = all[start:ends[i]]
		start = ends[i]
	}
	return f
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
