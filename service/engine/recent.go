package engine

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/rules"
)

// Recent remembers the callers that were warned or throttled in the last
// window, for the admin page: an Observer (pass it with WithObserver). It
// keeps at most max entries, one per rule and caller, evicting the one
// seen longest ago, so a flood of distinct callers bounds its memory. It
// is safe for concurrent use, and cheap on the decide path: a decision
// in which every rule is Normal costs a loop over its results, no lock
// and no allocation. It never exposes identifiers to metrics.
//
// It records checks, reports, batch items and Envoy's descriptors; peeks
// (cost 0) are not recorded.
type Recent struct {
	window time.Duration
	max    int

	mu   sync.Mutex
	m    map[flagKey]*flagEntry
	head *flagEntry // the entry seen last; head.prev the one seen longest ago (a ring)
}

// Flagged is a caller warned or throttled under a rule in the window.
type Flagged struct {
	// Rule is the rule's ID; Dimension and Identifier name the caller. For
	// an Envoy rule, Dimension is empty and Identifier is the descriptor's
	// counter: its domain and entries (domain|key=value|...).
	Rule, Dimension, Identifier string
	// State is the worst state the caller reached under the rule in the
	// window: core.Throttled (denied, or a shadow rule's denial) or
	// core.Warning.
	State core.State
	// Count is how many decisions warned or throttled the caller under the
	// rule in the window (since it was last absent for a whole window):
	// Warnings of them left it in the Warning state, Throttles denied it
	// (or, a shadow rule, would have). A caller warned on its way to a
	// denial has both, though its State is Throttled.
	Count, Warnings, Throttles int64
	// Last is when it last happened, on the store's clock.
	Last time.Time
}

type flagKey struct{ rule, dimension, identifier string }

type flagEntry struct {
	key        flagKey
	state      core.State
	warnings   int64
	throttles  int64
	last       int64 // µs
	prev, next *flagEntry
}

// NewRecent returns a Recent of the last window (at least 1s; less is 1s)
// holding at most maxEntries entries (at least 1; less is 1).
func NewRecent(window time.Duration, maxEntries int) *Recent {
	return &Recent{window: max(window, time.Second), max: max(maxEntries, 1), m: map[flagKey]*flagEntry{}}
}

// Decided records the warned or throttled rules of ev's decision under
// ev's caller.
func (r *Recent) Decided(_ context.Context, ev *Event) {
	if ev.Decision == nil || ev.Kind == KindPeek {
		return
	}
	rs := ev.Decision.Results
	if ev.Kind == KindDescriptors {
		if len(ev.Identities) != len(rs) {
			return
		}
	} else if ev.Identifier == "" {
		return
	}
	for i := range rs {
		if p := &rs[i]; p.State >= core.Warning && !p.Unidentified {
			r.record(ev, i)
			return
		}
	}
}

// record records the results of ev's decision flagged, from the i-th on.
func (r *Recent) record(ev *Event, i int) {
	var now int64
	rs := ev.Decision.Results
	r.mu.Lock()
	defer r.mu.Unlock()
	for ; i < len(rs); i++ {
		p := &rs[i]
		if p.State < core.Warning || p.Unidentified {
			continue
		}
		dim, id := ev.Dimension, ev.Identifier
		if ev.Kind == KindDescriptors {
			dim, id = "", ev.Identities[i]
		}
		at := p.At
		if at == 0 {
			if now == 0 {
				now = time.Now().UnixMicro()
			}
			at = now
		}
		r.add(flagKey{p.Policy, dim, id}, p.State, at)
	}
}

// add counts one flag of k at at (µs). r.mu is held.
func (r *Recent) add(k flagKey, st core.State, at int64) {
	win := r.window.Microseconds()
	if e := r.m[k]; e != nil {
		if at-e.last >= win { // absent a whole window: a new run
			e.warnings, e.throttles, e.state = 0, 0, core.Normal
		}
		e.count(st)
		e.state = max(e.state, st)
		e.last = max(e.last, at)
		r.toFront(e)
		return
	}
	// Make room: drop the entries past the window, then the oldest.
	for r.head != nil && (len(r.m) >= r.max || at-r.head.prev.last >= win) {
		r.remove(r.head.prev)
	}
	e := &flagEntry{key: flagKey{strings.Clone(k.rule), strings.Clone(k.dimension), strings.Clone(k.identifier)}, state: st, last: at}
	e.count(st)
	r.m[e.key] = e
	r.pushFront(e)
}

// count counts one decision that left e's caller in state st.
func (e *flagEntry) count(st core.State) {
	if st == core.Throttled {
		e.throttles++
	} else {
		e.warnings++
	}
}

func (r *Recent) pushFront(e *flagEntry) {
	if r.head == nil {
		e.prev, e.next = e, e
	} else {
		e.next, e.prev = r.head, r.head.prev
		r.head.prev.next = e
		r.head.prev = e
	}
	r.head = e
}

func (r *Recent) unlink(e *flagEntry) {
	if e.next == e {
		r.head = nil
	} else {
		e.prev.next, e.next.prev = e.next, e.prev
		if r.head == e {
			r.head = e.next
		}
	}
	e.prev, e.next = nil, nil
}

func (r *Recent) toFront(e *flagEntry) {
	if r.head == e {
		return
	}
	r.unlink(e)
	r.pushFront(e)
}

func (r *Recent) remove(e *flagEntry) {
	r.unlink(e)
	delete(r.m, e.key)
}

// Reloaded does nothing: a rule that changes keeps its entries until they
// age out.
func (r *Recent) Reloaded(*rules.Snapshot, error) {}

// List returns the callers flagged in the window that ends at now, the
// one flagged last first.
func (r *Recent) List(now time.Time) []Flagged {
	cut := now.Add(-r.window).UnixMicro()
	r.mu.Lock()
	out := make([]Flagged, 0, len(r.m))
	if r.head != nil {
		e := r.head
		for {
			if e.last > cut {
				out = append(out, Flagged{Rule: e.key.rule, Dimension: e.key.dimension, Identifier: e.key.identifier, State: e.state,
					Count: e.warnings + e.throttles, Warnings: e.warnings, Throttles: e.throttles, Last: time.UnixMicro(e.last)})
			}
			if e = e.next; e == r.head {
				break
			}
		}
	}
	r.mu.Unlock()
	slices.SortStableFunc(out, func(a, b Flagged) int { return b.Last.Compare(a.Last) })
	return out
}

// Len is how many entries Recent holds (at most its max), including
// those past the window not yet dropped.
func (r *Recent) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
}

var _ Observer = (*Recent)(nil)
