package httplimit

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/adapters/internal/mw"
	"github.com/sluicehq/sluice/core"
)

// Formatter writes the header fields of HeaderConfig.Format for one
// middleware, cheaply: it keeps the text that depends only on a policy and
// its limit (its RateLimit-Policy member and its X-RateLimit-Limit) from one
// request to the next, and writes the rest into the request's Scratch, so
// that a request's headers take no allocation of their own. Every adapter
// builds one per middleware. A Formatter is safe for concurrent use.
type Formatter struct {
	cfg   HeaderConfig
	epoch bool // X-RateLimit-Reset in epoch seconds: the headers need the time
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
	capacity int64      // the capacity applied (mw.Capacity)
}

// NewFormatter returns a Formatter of the headers c selects.
func NewFormatter(c HeaderConfig) *Formatter {
	return &Formatter{cfg: c, epoch: c.Omit&XRateLimit == 0 && c.Reset == ResetEpoch}
}

// Config returns the HeaderConfig f formats.
func (f *Formatter) Config() HeaderConfig { return f.cfg }

// wallEvery is how often Now reads the wall clock.
const wallEvery = time.Second

// Now returns the instant SetHeaders and Append need: the current time when
// X-RateLimit-Reset is written in epoch seconds, and the zero Time (no
// clock read) when no header depends on it. It reads the wall clock (as
// time.Now does) at most once a second, and otherwise adds the monotonic
// time elapsed since that reading: one clock read instead of two, and the
// same whole seconds but when the wall clock is stepped or slewed within
// that second.
func (f *Formatter) Now() time.Time {
	if !f.epoch {
		return time.Time{}
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

// SetHeaders formats the header fields of s.Decision at instant now,
// exactly as f.Config().Format would, and sets them on h as SetHeaders
// does, keeping the values in s.
func (f *Formatter) SetHeaders(h http.Header, s *Scratch, now time.Time) {
	var fb fieldsBuilder
	out := fb.format(f.cfg, f, &s.Decision, now, s.buf[:s.used])
	if len(out) <= len(s.buf) { // still s.buf: append moves only past its capacity
		s.used = uint8(len(out))
	}
	// The bytes are never written again: s.used only grows, and a spilled
	// array is referenced by these strings alone.
	all := unsafe.String(unsafe.SliceData(out), len(out))
	var vals []string
	if n := int(s.nval); n+fb.n <= len(s.vals) {
		vals = s.vals[n : n+fb.n]
		s.nval += uint8(fb.n)
	} else {
		vals = make([]string, fb.n)
	}
	for i := range fb.n {
		vals[i] = fb.value(i, all)
		h[fieldKeys[fb.id[i]]] = vals[i : i+1 : i+1]
	}
}

// Append is for adapters that keep no Scratch: it appends to buf, as
// append does, the values of d's header fields at instant now that are not
// constant or cached, and returns the fields (exactly as f.Config().Format
// would) and the extended slice. The values alias that slice's array, so
// its bytes must not be written again while they are in use; for a
// framework that copies header values (fasthttp), buf can be an array on
// the stack.
func (f *Formatter) Append(buf []byte, d *core.Decision, now time.Time) (Fields, []byte) {
	var fb fieldsBuilder
	out := fb.format(f.cfg, f, d, now, buf)
	all := unsafe.String(unsafe.SliceData(out), len(out))
	var fields Fields
	fields.N = fb.n
	for i := range fb.n {
		fields.Name[i], fields.Value[i] = fieldNames[fb.id[i]], fb.value(i, all)
	}
	return fields, out
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
		uint64(mw.Capacity(p))*0x9e3779b97f4a7c15 ^ uint64(l.Rate)*0xc2b2ae3d27d4eb4f ^
		uint64(l.Period)*0x165667b19e3779f9 ^ uint64(l.Burst)*0xd6e8feb86659fd93 ^ uint64(l.Algorithm)
	h ^= h >> 29
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 32
	slot := &f.slots[h%textSlots]
	t := slot.Load()
	if t != nil && t.capacity == mw.Capacity(p) && t.lim == l && t.name == p.Policy {
		return t
	}
	if t == nil || f.miss.Add(1)%16 == 0 {
		slot.Store(&policyText{
			name:     p.Policy,
			limit:    strconv.FormatInt(mw.Capacity(p), 10),
			item:     string(appendItem(nil, p)),
			lim:      l,
			capacity: mw.Capacity(p),
		})
	}
	return nil
}

// scratchBytes is the room a Scratch has for header values: enough for the
// default headers of an allowed request under a policy named with up to
// about 20 characters (longer values take an allocation of their own).
const scratchBytes = 64

const _ = uint8(scratchBytes) // Scratch.used counts them in a byte

// Scratch is the memory a sluice middleware needs for one request, in one
// allocation: the Decision, a context that carries it, the request that
// carries that context, and room for the header values. Allocate one per
// request, or embed it in a per-request value; never reuse one for another
// request (a handler may keep the Decision, and the header values it set
// stay in use).
type Scratch struct {
	// Decision is the request's Decision: pass &s.Decision to
	// core.Limiter.Decide.
	Decision core.Decision

	ctx  decisionContext
	req  http.Request
	vals [6]string // the default headers of an allowed request
	nval uint8
	used uint8
	buf  [scratchBytes]byte
}

// Context returns parent carrying s.Decision, where DecisionFrom finds it,
// as NewContext(parent, &s.Decision) does but without an allocation: the
// context lives in s. Call it once per Scratch.
func (s *Scratch) Context(parent context.Context) context.Context {
	s.ctx = decisionContext{Context: parent, d: &s.Decision}
	return &s.ctx
}

// Request returns r with a context carrying s.Decision, as
// r.WithContext(s.Context(r.Context())) does, but kept in s: no allocation.
// Call it once per Scratch.
func (s *Scratch) Request(r *http.Request) *http.Request {
	s.req = *r.WithContext(s.Context(r.Context()))
	return &s.req
}

// decisionContext is a context carrying a Decision under decisionKey, like
// the context of context.WithValue.
type decisionContext struct {
	context.Context
	d *core.Decision
}

func (c *decisionContext) Value(key any) any {
	if _, ok := key.(decisionKey); ok {
		return c.d
	}
	return c.Context.Value(key)
}

func (c *decisionContext) String() string {
	return contextName(c.Context) + ".WithValue(httplimit.decisionKey, *core.Decision)"
}

func contextName(c context.Context) string {
	if s, ok := c.(interface{ String() string }); ok {
		return s.String()
	}
	return "context"
}
