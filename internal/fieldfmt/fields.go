package fieldfmt

import (
	"math"
	"strconv"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/core"
)

// The families of fields, as bits of Config.Omit (ratelimitfields.Families).
const (
	Draft uint8 = 1 << iota
	XRateLimit
	RetryAfter
	State
)

// The formats of X-RateLimit-Reset (ratelimitfields.ResetFormat).
const (
	ResetEpoch uint8 = iota
	ResetDelta
)

// Config is ratelimitfields.Config: the families omitted and the reset
// format.
type Config struct {
	Omit  uint8
	Reset uint8
}

// The fields, in the order they are written (ratelimitfields.Field).
const (
	FieldPolicy uint8 = iota
	FieldRateLimit
	FieldLimit
	FieldRemaining
	FieldReset
	FieldState
	FieldRetryAfter
	NumFields
)

// Names are the fields' names as written by adapters that keep case;
// CanonicalKeys are the same names as net/http canonicalizes them (the
// keys of an http.Header).
var (
	Names         = [NumFields]string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "X-RateLimit-State", "Retry-After"}
	CanonicalKeys = [NumFields]string{"Ratelimit-Policy", "Ratelimit", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "X-Ratelimit-State", "Retry-After"}
)

// Fields is a formatted set of fields: field ID[i] has Value[i].
type Fields struct {
	N     int
	ID    [NumFields]uint8
	Value [NumFields]string
}

// sfMax is the largest Integer of RFC 9651 Structured Fields (15 digits).
const sfMax = 999_999_999_999_999

// Format returns the fields c selects of d at instant now. All values
// share one allocation.
func Format(c Config, d *core.Decision, now time.Time) Fields {
	var buf [512]byte
	var fb Builder
	out := fb.format(c, nil, d, now, buf[:0])
	if fb.n == 0 {
		return Fields{}
	}
	return fb.fields(string(out))
}

// Builder records the fields of one response, for adapters that set them
// one by one (Formatter.Build): each value is either a string already (a
// constant or cached text) or a span of the buffer Build appends to, read
// once the buffer is complete. The zero value is empty.
type Builder struct {
	n          int
	id         [NumFields]uint8
	set        [NumFields]string
	start, end [NumFields]int32 // the span of field i when set[i] is ""
}

// put adds field id whose value is v (not empty).
func (fb *Builder) put(id uint8, v string) {
	fb.id[fb.n], fb.set[fb.n] = id, v
	fb.n++
}

// span adds field id whose value is out[from:to].
func (fb *Builder) span(id uint8, from, to int) {
	fb.id[fb.n], fb.start[fb.n], fb.end[fb.n] = id, int32(from), int32(to)
	fb.n++
}

// Len returns the number of fields recorded.
func (fb *Builder) Len() int { return fb.n }

// ID returns the field recorded i-th (FieldPolicy...).
func (fb *Builder) ID(i int) uint8 { return fb.id[i] }

// Value returns the value of the field recorded i-th, all being the buffer
// Build returned, as a string.
func (fb *Builder) Value(i int, all string) string {
	if v := fb.set[i]; v != "" {
		return v
	}
	return all[fb.start[i]:fb.end[i]]
}

// ValueBytes is Value as bytes, out being the buffer Build returned, for
// a framework's setters that copy them (fasthttp's): they must not be
// written.
func (fb *Builder) ValueBytes(i int, out []byte) []byte {
	if v := fb.set[i]; v != "" {
		return unsafe.Slice(unsafe.StringData(v), len(v))
	}
	return out[fb.start[i]:fb.end[i]]
}

// fields returns the recorded fields, all being the final buffer. It
// returns them rather than filling a *Fields, so that all does not escape.
func (fb *Builder) fields(all string) Fields {
	f := Fields{N: fb.n}
	for i := range fb.n {
		f.ID[i], f.Value[i] = fb.id[i], fb.Value(i, all)
	}
	return f
}

// format appends to out the values of d's fields that are not constant or
// in fm's cache (fm may be nil), records every field in fb and returns out.
func (fb *Builder) format(c Config, fm *Formatter, d *core.Decision, now time.Time, out []byte) []byte {
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
			fb.put(FieldPolicy, only.item)
		} else {
			fb.span(FieldPolicy, from, len(out))
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
			out = strconv.AppendInt(out, min(Seconds(t), sfMax), 10)
		}
		fb.span(FieldRateLimit, from, len(out))
	}
	if c.Omit&XRateLimit == 0 {
		if bt == nil {
			bt = fm.text(b)
		}
		if bt != nil {
			fb.put(FieldLimit, bt.limit)
		} else {
			from := len(out)
			out = strconv.AppendInt(out, b.Capacity, 10)
			fb.span(FieldLimit, from, len(out))
		}
		if rTo == 0 {
			rFrom = len(out)
			out = strconv.AppendInt(out, b.Remaining, 10)
			rTo = len(out)
		}
		fb.span(FieldRemaining, rFrom, rTo) // RateLimit's r when they are equal
		from := len(out)
		reset := Seconds(b.ResetAfter)
		if c.Reset == ResetEpoch {
			reset = epochReset(now, b.ResetAfter)
		}
		out = strconv.AppendInt(out, reset, 10)
		fb.span(FieldReset, from, len(out))
	}
	if c.Omit&State == 0 {
		fb.put(FieldState, d.State().String())
	}
	if c.Omit&RetryAfter == 0 && !d.Allowed {
		if wait, never := Retry(d); !never {
			from := len(out)
			out = strconv.AppendInt(out, Seconds(wait), 10)
			fb.span(FieldRetryAfter, from, len(out))
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
	out = strconv.AppendInt(out, min(p.Capacity, sfMax), 10)
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
//   - sliding window counter: until the key is fresh (ResetAfter), an
//     upper bound: its estimate decays sooner.
//
// t is never earlier than the instant more quota comes: a client that waits
// t is not refused for want of it (a denied one's t is its Retry-After).
// The counter's can be later than w of RateLimit-Policy, by up to another
// window: a wait into the next window, or its fresh instant.
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
	return t, true
}

// window is w of RateLimit-Policy: the seconds in which the capacity is
// restored.
func window(l core.Limit) int64 {
	return max(Seconds(windowDuration(l)), 1)
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
		d = Seconds(frac + after)
	}
	sec := now.Unix()
	if sec > 0 && d > math.MaxInt64-sec {
		return math.MaxInt64
	}
	return sec + d
}

// Seconds rounds d up to whole seconds (delay-seconds never round down: a
// client told 0 while limited would spin).
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	if d > math.MaxInt64-time.Second {
		return int64(math.MaxInt64 / time.Second)
	}
	return int64((d + time.Second - 1) / time.Second)
}

// Retry is the wait of a denied Decision: that of its binding policy,
// which is the denying policy with the longest RetryAfter (a request passes
// only once every one of them admits it), and never when that policy can
// never admit it (its cost exceeds the capacity). It is zero for an allowed
// Decision.
func Retry(d *core.Decision) (wait time.Duration, never bool) {
	if d.Allowed || !d.Limited() {
		return 0, false
	}
	b := &d.Results[d.Binding]
	return b.RetryAfter, b.Never()
}
