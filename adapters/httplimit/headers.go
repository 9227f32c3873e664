package httplimit

import (
	"math"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/adapters/internal/mw"
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
		if t, ok := untilMore(b); ok {
			out = append(out, ";t="...)
			out = strconv.AppendInt(out, min(seconds(t), sfMax), 10)
		}
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
			out = strconv.AppendInt(out, mw.Capacity(b), 10)
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
			reset = epochReset(now, b.ResetAfter)
		}
		out = strconv.AppendInt(out, reset, 10)
		fb.span(fieldReset, from, len(out))
	}
	if c.Omit&State == 0 {
		fb.put(fieldState, d.State().String())
	}
	if c.Omit&RetryAfter == 0 && !d.Allowed {
		if wait, never := mw.Retry(d); !never {
			from := len(out)
			out = strconv.AppendInt(out, seconds(wait), 10)
			fb.span(fieldRetryAfter, from, len(out))
		}
	}
	return out
}

// appendItem appends p's member of RateLimit-Policy: the limit applied (an
// override's, a tier's or a guard fallback's, if any), never the policy's
// configured one.
func appendItem(out []byte, p *core.PolicyResult) []byte {
	out = append(out, '"')
	out = append(out, p.Policy...)
	out = append(out, `";q=`...)
	out = strconv.AppendInt(out, min(mw.Capacity(p), sfMax), 10)
	out = append(out, ";w="...)
	return strconv.AppendInt(out, min(window(p.Limit), sfMax), 10)
}

// untilMore is the t of RateLimit for p, as
// draft-ietf-httpapi-ratelimit-headers-10 defines it: the time until more
// quota is available, not until the quota is whole (that is
// X-RateLimit-Reset). ok is false when no t applies: the key is fresh (no
// more quota can come), or the request costs more than the capacity (no wait
// lets it through).
//
//   - denied: RetryAfter, the wait until this request would pass;
//   - token bucket, leaky bucket, GCRA: the time until the next whole unit
//     is back, from ResetAfter and the emission interval Period/Rate;
//   - fixed window: until the window ends (ResetAfter);
//   - sliding window log: until the newest admission leaves the window
//     (ResetAfter), an upper bound: the oldest may leave sooner;
//   - sliding window counter: ResetAfter, at most one Period.
//
// For the sliding window counter, t (denied too) is never more than w of
// RateLimit-Policy; the other algorithms never need more, but for an
// identity blocked (core.Limiter.Block) until later.
func untilMore(p *core.PolicyResult) (t time.Duration, ok bool) {
	if p.Never() {
		return 0, false
	}
	l := p.Limit
	if !p.Allowed {
		t = p.RetryAfter
	} else {
		if p.ResetAfter <= 0 {
			return 0, false
		}
		t = p.ResetAfter
		if l.Algorithm.Bucket() && l.Rate > 0 && l.Period > 0 {
			// The bucket is back to Remaining+1 whole units when ResetAfter
			// has shrunk to (capacity - Remaining - 1) emission intervals.
			ahead := float64(l.Capacity()-p.Remaining-1) * float64(l.Period) / float64(l.Rate)
			if ahead > 0 {
				t = time.Duration(max(float64(p.ResetAfter)-ahead, 1))
			}
		}
	}
	if l.Algorithm == core.SlidingWindowCounter {
		// Its fresh instant, and a wait into the next window, can be up to
		// two windows away: t stays within the window it advertises.
		t = min(t, windowDuration(l))
	}
	return t, true
}

// window is w of RateLimit-Policy: the seconds in which the capacity is
// restored.
func window(l core.Limit) int64 {
	return max(seconds(windowDuration(l)), 1)
}

// windowDuration is the time in which l's capacity is restored: Period for
// windows, Capacity×Period/Rate for buckets.
func windowDuration(l core.Limit) time.Duration {
	d := l.Period
	if l.Algorithm.Bucket() && l.Capacity() != l.Rate && l.Rate > 0 {
		f := float64(l.Period) * float64(l.Capacity()) / float64(l.Rate)
		if f >= math.MaxInt64 {
			return time.Duration(math.MaxInt64)
		}
		d = time.Duration(f)
	}
	return d
}

// epochReset is X-RateLimit-Reset in epoch seconds: now plus after, rounded
// up, saturating rather than overflowing for a very long period.
func epochReset(now time.Time, after time.Duration) int64 {
	frac := time.Duration(now.Nanosecond()) // now = now.Unix() + frac
	var d int64
	if after > math.MaxInt64-frac {
		d = int64(math.MaxInt64/time.Second) + 1
	} else {
		d = seconds(frac + after)
	}
	sec := now.Unix()
	if sec > 0 && d > math.MaxInt64-sec {
		return math.MaxInt64
	}
	return sec + d
}

// Problem returns the RFC 9457 application/problem+json body of a denied
// request: type quota-exceeded, with the policies that denied it. When a
// policy can never admit the request (its cost exceeds the capacity, or the
// request has no identity for a policy that requires one), the detail says
// so, no retry time is given, and the member "retry" is false.
func Problem(d *core.Decision) []byte {
	wait, never := mw.Retry(d)
	out := make([]byte, 0, 256)
	out = append(out, `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"`...)
	switch unidentified := firstUnidentified(d); {
	case unidentified != nil:
		out = append(out, `The request has no identity for policy \"`...)
		out = append(out, unidentified.Policy...)
		out = append(out, `\" (a missing key); it cannot succeed without one: do not retry it as it is.`...)
	case never:
		out = append(out, "The request costs more than the limit allows at once; it can never succeed: do not retry it."...)
	default:
		out = append(out, "Rate limit exceeded; retry in "...)
		out = strconv.AppendInt(out, seconds(wait), 10)
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
	out = append(out, ']')
	if never {
		out = append(out, `,"retry":false`...)
	}
	return append(out, "}\n"...)
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

// ProblemContentType is the media type of Problem's body.
const ProblemContentType = "application/problem+json"

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
