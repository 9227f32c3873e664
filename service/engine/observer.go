package engine

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/rules"
)

// Kind names the engine call an Event describes: a label of metrics.
type Kind uint8

// The kinds of decision.
const (
	// KindCheck is a Check of cost >= 1 (or one item of CheckBatch).
	KindCheck Kind = iota
	// KindPeek is a Check of cost 0.
	KindPeek
	// KindReport is a Report.
	KindReport
	// KindDescriptors is a Descriptors call (Envoy's ShouldRateLimit).
	KindDescriptors
)

// String returns "check", "peek", "report" or "descriptors".
func (k Kind) String() string {
	switch k {
	case KindCheck:
		return "check"
	case KindPeek:
		return "peek"
	case KindReport:
		return "report"
	case KindDescriptors:
		return "descriptors"
	}
	return "unknown"
}

// Event describes one decision to an Observer.
type Event struct {
	// Kind is the call decided.
	Kind Kind
	// Decision holds one PolicyResult per rule that applied (Policy is the
	// rule's ID; Decision.Outcome(i) labels it: allowed, warning, denied,
	// shadow_denied, repeat, failed_open, ...). Empty when no rule
	// applied; nil when Err is set. It must not be kept or changed.
	Decision *core.Decision
	// Took is how long the decision took (for a batch: the whole batch).
	Took time.Duration
	// Err is the error the caller got: invalid input (wrapping
	// ErrInvalid) or a store failure.
	Err error
	// Dimension and Identifier name the caller of a Check, a Report or an
	// item of a batch (every rule of Decision counted that caller); both
	// are empty for Descriptors. The identifier is the caller's (a user,
	// an address, a key): an Observer must never put it in a metric label
	// (Recent keeps it, bounded, for the admin page only).
	Dimension, Identifier string
	// Identities, for Descriptors, holds the identity of the counter of
	// each of Decision.Results, in order: the domain and the descriptor's
	// entries (domain|key=value|...). Nil for the other kinds. As
	// personal as Identifier: never a metric label.
	Identities []string
}

// Observer sees every decision and every rules reload of an Engine: the
// service's metrics implement it. Its methods run in the calling
// goroutine, concurrently (checks run in parallel), and must be fast; they
// must not keep the Event nor its Decision (both are reused).
type Observer interface {
	// Decided is called after each decision (each item of a batch).
	Decided(ctx context.Context, ev *Event)
	// Reloaded is called when Run puts a new snapshot in force (err nil),
	// or when a new rule set was refused (err set; s is the snapshot
	// still in force).
	Reloaded(s *rules.Snapshot, err error)
}

// observe tells the observers of a decision of c (nil for Descriptors,
// whose counters' identities are ids). The Event, and the copy of d it
// points to, are pooled: an Observer keeps neither.
func (e *Engine) observe(ctx context.Context, kind Kind, c *Check, ids []string, d *core.Decision, start time.Time, err error) {
	if len(e.cfg.observers) == 0 {
		return
	}
	ob, _ := e.events.Get().(*observation)
	if ob == nil {
		ob = new(observation)
	}
	ob.ev = Event{Kind: kind, Took: time.Since(start), Err: err, Identities: ids}
	if d != nil && err == nil {
		ob.d = *d
		ob.ev.Decision = &ob.d
	}
	if c != nil {
		ob.ev.Dimension, ob.ev.Identifier = c.Dimension, c.Identifier
	}
	for _, o := range e.cfg.observers {
		o.Decided(ctx, &ob.ev)
	}
	*ob = observation{}
	e.events.Put(ob)
}

// observeKept is observe for a decision of c in memory of the caller's
// heap that it keeps, unchanged, until observeKept returns (a batch's
// pooled Result): the Event points to d itself, not to a copy.
func (e *Engine) observeKept(ctx context.Context, kind Kind, c *Check, d *core.Decision, start time.Time, err error) {
	if len(e.cfg.observers) == 0 {
		return
	}
	ob, _ := e.events.Get().(*observation)
	if ob == nil {
		ob = new(observation)
	}
	ob.ev = Event{Kind: kind, Took: time.Since(start), Err: err, Dimension: c.Dimension, Identifier: c.Identifier}
	if err == nil {
		ob.ev.Decision = d
	}
	for _, o := range e.cfg.observers {
		o.Decided(ctx, &ob.ev)
	}
	ob.ev = Event{}
	e.events.Put(ob)
}

// observation is an Event and the Decision it points to, pooled.
type observation struct {
	ev Event
	d  core.Decision
}
