package fieldfmt

import (
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/core"
)

// Formatter writes the fields of Format for one middleware, cheaply: it
// keeps the text that depends only on a policy and its limit (its
// RateLimit-Policy member and its X-RateLimit-Limit) from one request to
// the next, and appends the rest into memory the caller owns, so that a
// request's fields take no allocation of their own. Every adapter builds
// one per middleware. A Formatter is safe for concurrent use.
type Formatter struct {
	cfg   Config
	epoch bool // X-RateLimit-Reset in epoch seconds: the fields need the time
	slots [textSlots]atomic.Pointer[policyText]
	miss  atomic.Uint32
	wall  atomic.Pointer[time.Time] // a time.Now reading, for Now
}

// textSlots is the size of a Formatter's cache of policy texts: distinct
// (policy, limit) pairs beyond it share slots.
const textSlots = 64

// policyText is the text of one policy under one limit.
type policyText struct {
	name     string
	limit    string     // X-RateLimit-Limit: the capacity
	item     string     // the member of RateLimit-Policy
	lim      core.Limit // the limit applied
	capacity int64      // the capacity applied (Capacity)
}

// NewFormatter returns a Formatter of the fields c selects.
func NewFormatter(c Config) *Formatter {
	return &Formatter{cfg: c, epoch: c.Omit&XRateLimit == 0 && c.Reset == ResetEpoch}
}

// Config returns the Config f formats.
func (f *Formatter) Config() Config { return f.cfg }

// wallEvery is how often Now reads the wall clock.
const wallEvery = time.Second

// Now returns the instant Append needs for d: the zero Time (no clock
// read) when no field depends on it, and otherwise the instant d was
// decided at on the store's clock (the binding policy's Result.At, to
// which its ResetAfter is relative, so X-RateLimit-Reset is the instant
// the store resets the key), or the current time when no store decided (a
// failure policy). The current time is read from the wall clock (as
// time.Now does) at most once a second, and otherwise as the monotonic
// time elapsed since that reading: one clock read instead of two, and the
// same whole seconds but when the wall clock is stepped or slewed within
// that second.
func (f *Formatter) Now(d *core.Decision) time.Time {
	if !f.epoch {
		return time.Time{}
	}
	if at, ok := decidedAt(d); ok {
		return at
	}
	if base := f.wall.Load(); base != nil {
		if el := time.Since(*base); el >= 0 && el < wallEvery {
			return base.Add(el)
		}
	}
	now := time.Now()
	f.wall.Store(&now)
	return now
}

// DecidedAt returns the instant the fields of d are relative to: the
// instant d was decided at on the store's clock (the binding policy's
// Result.At), or now when no store decided it (a failure policy).
func DecidedAt(d *core.Decision, now time.Time) time.Time {
	if at, ok := decidedAt(d); ok {
		return at
	}
	return now
}

func decidedAt(d *core.Decision) (time.Time, bool) {
	if b := d.Binding; b >= 0 && b < len(d.Results) && d.Results[b].At > 0 {
		return time.UnixMicro(d.Results[b].At), true
	}
	return time.Time{}, false
}

// Append appends to buf, as append does, the values of d's fields at
// instant now that are not constant or cached, and returns the fields
// (exactly as Format(f.Config(), d, now) would) and the extended slice.
// The values alias that slice's array, so its bytes must not be written
// again while they are in use; for a framework that copies header values
// (fasthttp), buf can be an array on the stack.
func (f *Formatter) Append(buf []byte, d *core.Decision, now time.Time) (Fields, []byte) {
	var fb Builder
	out := fb.format(f.cfg, f, d, now, buf)
	return fb.fields(unsafe.String(unsafe.SliceData(out), len(out))), out
}

// Build is Append for adapters that set the fields one by one without a
// Fields in between: it appends to buf the values that are not constant or
// cached, records every field in fb (which must be empty), and returns the
// extended slice, from which fb.Value reads each value.
func (f *Formatter) Build(fb *Builder, buf []byte, d *core.Decision, now time.Time) []byte {
	return fb.format(f.cfg, f, d, now, buf)
}

// text returns the cached text of p's policy under the limit applied to
// it (p.Limit: an override's or a tier's when there is one, so the cache
// keys on it, never on the policy alone), or nil if it is not cached (it is
// then cached for the next request when its slot is free, or now and then
// when not, so that alternating limits never turn every request into an
// allocation). f may be nil: no cache.
func (f *Formatter) text(p *core.PolicyResult) *policyText {
	if f == nil {
		return nil
	}
	l := p.Limit
	// A policy's name is the Limiter's string, the same for every request:
	// its address identifies it (the name is compared below anyway).
	h := uint64(uintptr(unsafe.Pointer(unsafe.StringData(p.Policy))))*0xff51afd7ed558ccd ^ uint64(len(p.Policy)) ^
		uint64(p.Capacity)*0x9e3779b97f4a7c15 ^ uint64(l.Rate)*0xc2b2ae3d27d4eb4f ^
		uint64(l.Period)*0x165667b19e3779f9 ^ uint64(l.Burst)*0xd6e8feb86659fd93 ^ uint64(l.Algorithm)
	h ^= h >> 29
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 32
	slot := &f.slots[h%textSlots]
	t := slot.Load()
	if t != nil && t.capacity == p.Capacity && t.lim == l && t.name == p.Policy {
		return t
	}
	if t == nil || f.miss.Add(1)%16 == 0 {
		slot.Store(&policyText{
			name:     p.Policy,
			limit:    strconv.FormatInt(p.Capacity, 10),
			item:     string(appendItem(nil, p)),
			lim:      l,
			capacity: p.Capacity,
		})
	}
	return nil
}
