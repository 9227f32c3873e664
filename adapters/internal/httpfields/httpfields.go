// Package httpfields writes the rate-limit fields onto net/http headers for
// the adapters built on net/http (httplimit, ginlimit, echolimit), without
// an allocation of their own: Scratch is the memory one request needs, and
// the context that carries its Decision to DecisionFrom.
package httpfields

import (
	"context"
	"net/http"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/fieldfmt"
)

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

// SetHeaders formats the fields of s.Decision at instant now with f,
// exactly as fieldfmt.Format would, and sets them on h (replacing any
// earlier values of those names), keeping the values in s.
func (s *Scratch) SetHeaders(f *fieldfmt.Formatter, h http.Header, now time.Time) {
	var fb fieldfmt.Builder
	out := f.Build(&fb, s.buf[:s.used], &s.Decision, now)
	if len(out) <= len(s.buf) { // still s.buf: append moves only past its capacity
		s.used = uint8(len(out))
	}
	// The bytes are never written again: s.used only grows, and a spilled
	// array is referenced by these strings alone.
	all := unsafe.String(unsafe.SliceData(out), len(out))
	n := fb.Len()
	var vals []string
	if used := int(s.nval); used+n <= len(s.vals) {
		vals = s.vals[used : used+n]
		s.nval += uint8(n)
	} else {
		vals = make([]string, n)
	}
	for i := range n {
		vals[i] = fb.Value(i, all)
		h[fieldfmt.CanonicalKeys[fb.ID(i)]] = vals[i : i+1 : i+1]
	}
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

// decisionKey is the context key of the Decision.
type decisionKey struct{}

// NewContext returns a copy of ctx carrying d, where DecisionFrom finds it.
func NewContext(ctx context.Context, d *core.Decision) context.Context {
	return context.WithValue(ctx, decisionKey{}, d)
}

// DecisionFrom returns the Decision a sluice middleware made for the
// request of ctx.
func DecisionFrom(ctx context.Context) (*core.Decision, bool) {
	d, ok := ctx.Value(decisionKey{}).(*core.Decision)
	return d, ok
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
	return contextName(c.Context) + ".WithValue(httplimit.DecisionFrom, *core.Decision)"
}

func contextName(c context.Context) string {
	if s, ok := c.(interface{ String() string }); ok {
		return s.String()
	}
	return "context"
}
