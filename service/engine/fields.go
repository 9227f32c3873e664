package engine

import (
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/fieldfmt"
	"github.com/sluicehq/sluice/ratelimitfields"
)

// Formatter writes the rate-limit fields of decisions for one front door:
// exactly FieldsFor(c, degraded).Format(d, at), but it keeps the text that
// depends only on a rule and the limit applied (its RateLimit-Policy member
// and X-RateLimit-Limit) from one decision to the next, so that a
// decision's fields cost one allocation, of the text that changes (what is
// left, the waits). It is safe for concurrent use.
type Formatter struct {
	normal, closed *fieldfmt.Formatter // closed: FieldsFor's when the guard failed closed
}

// NewFormatter returns a Formatter of the fields c selects.
func NewFormatter(c ratelimitfields.Config) *Formatter {
	spec := func(c ratelimitfields.Config) fieldfmt.Config {
		return fieldfmt.Config{Omit: uint8(c.Omit), Reset: uint8(c.Reset)}
	}
	return &Formatter{
		normal: fieldfmt.NewFormatter(spec(c)),
		closed: fieldfmt.NewFormatter(spec(FieldsFor(c, core.FailedClosed))),
	}
}

// Format returns the fields of d, whose Degraded is degraded, at instant at
// (see ratelimitfields.Config.Format).
func (f *Formatter) Format(d *core.Decision, degraded core.Source, at time.Time) ratelimitfields.Fields {
	fm := f.normal
	if degraded == core.FailedClosed {
		fm = f.closed
	}
	var buf [256]byte
	var fb fieldfmt.Builder
	out := fm.Build(&fb, buf[:0], d, at)
	var all string
	if len(out) > 0 {
		all = string(out)
	}
	fs := ratelimitfields.Fields{N: fb.Len()}
	for i := range fb.Len() {
		fs.Field[i], fs.Value[i] = ratelimitfields.Field(fb.ID(i)), fb.Value(i, all)
	}
	return fs
}
