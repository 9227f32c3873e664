package traffic

import (
	"cmp"
	"container/list"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/engine"
)

// Caller is a caller throttled under a rule in the last hour.
type Caller struct {
	// Rule is the rule's ID; Dimension and Identifier name the caller (for
	// an Envoy rule Dimension is empty and Identifier is the descriptor's
	// counter: domain|key=value|...).
	Rule, Dimension, Identifier string
	// Shadow: the rule is a shadow rule; it would have denied these
	// checks, and did not.
	Shadow bool
	// Hour is how many of the caller's checks the rule denied (or, a
	// shadow rule, would have) in the last hour, in 5-minute steps: the
	// first step may reach back up to 5 minutes more.
	Hour int64
	// Last is the last denial; Until is when the caller may retry after
	// it (Forever: never, its cost is above the limit).
	Last, Until time.Time
	Forever     bool
}

// The table's hour is in steps of bucketLen, the last one under way.
const (
	bucketLen = 5 * time.Minute
	buckets   = int(time.Hour/bucketLen) + 1
)

type callerKey struct{ rule, dimension, identifier string }

type callerEntry struct {
	key         callerKey
	shadow      bool
	last, until int64 // µs
	step        [buckets]int64
	n           [buckets]int64
	el          *list.Element
}

// callers is the bounded table of throttled callers: one entry per rule
// and caller, the one throttled longest ago evicted first.
type callers struct {
	mu  sync.Mutex
	max int
	m   map[callerKey]*callerEntry
	lru *list.List // of *callerEntry, the one throttled last at the front
}

func newCallers(n int) *callers {
	return &callers{max: n, m: map[callerKey]*callerEntry{}, lru: list.New()}
}

// record counts the denials and shadow denials of ev's decision under its
// caller.
func (c *callers) record(ev *engine.Event) {
	rs := ev.Decision.Results
	if ev.Kind == engine.KindDescriptors && len(ev.Identities) != len(rs) {
		return
	}
	if ev.Kind != engine.KindDescriptors && ev.Identifier == "" {
		return
	}
	var now int64
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range rs {
		p := &rs[i]
		if o, ok := outcomeOf(ev.Decision, i); !ok || o < ShadowDenied || p.Unidentified {
			continue
		}
		k := callerKey{p.Policy, ev.Dimension, ev.Identifier}
		if ev.Kind == engine.KindDescriptors {
			k.dimension, k.identifier = "", ev.Identities[i]
		}
		at := p.At
		if at == 0 {
			if now == 0 {
				now = time.Now().UnixMicro()
			}
			at = now
		}
		c.add(k, p, at)
	}
}

// add counts one denial of k at at (µs). c.mu is held.
func (c *callers) add(k callerKey, p *core.PolicyResult, at int64) {
	e := c.m[k]
	if e == nil {
		for len(c.m) >= c.max {
			old := c.lru.Back()
			delete(c.m, old.Value.(*callerEntry).key)
			c.lru.Remove(old)
		}
		e = &callerEntry{key: callerKey{strings.Clone(k.rule), strings.Clone(k.dimension), strings.Clone(k.identifier)}}
		e.el = c.lru.PushFront(e)
		c.m[e.key] = e
	} else {
		c.lru.MoveToFront(e.el)
	}
	e.shadow = p.Shadow
	step := at / bucketLen.Microseconds()
	i := int(step % int64(buckets))
	if e.step[i] != step {
		e.step[i], e.n[i] = step, 0
	}
	e.n[i]++
	if at >= e.last {
		e.last = at
		e.until = at + p.RetryAfter.Microseconds()
		if p.RetryAfter == core.RetryNever {
			e.until = -1
		}
	}
}

// list returns the callers throttled in the hour up to now.
func (c *callers) list(now time.Time) []Caller {
	cur := now.UnixMicro() / bucketLen.Microseconds()
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Caller
	for _, e := range c.m {
		var n int64
		for i := range e.step {
			if e.step[i] > cur-int64(buckets) && e.step[i] <= cur {
				n += e.n[i]
			}
		}
		if n == 0 {
			continue
		}
		out = append(out, Caller{Rule: e.key.rule, Dimension: e.key.dimension, Identifier: e.key.identifier, Shadow: e.shadow,
			Hour: n, Last: time.UnixMicro(e.last).UTC(), Until: time.UnixMicro(e.until).UTC(), Forever: e.until < 0})
	}
	return out
}

// ThrottledNow returns the callers whose last check under a rule was
// denied (or would have been, by a shadow rule) and whose retry time has
// not come at now: the one whose wait ends last first, at most n.
func (r *Recorder) ThrottledNow(now time.Time, n int) []Caller {
	var out []Caller
	for _, c := range r.callers.list(now) {
		if c.Forever || c.Until.After(now) {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b Caller) int {
		if a.Forever != b.Forever {
			if a.Forever {
				return -1
			}
			return 1
		}
		return cmp.Or(b.Until.Compare(a.Until), cmp.Compare(b.Hour, a.Hour), strings.Compare(a.Identifier, b.Identifier))
	})
	return out[:min(n, len(out))]
}

// MostThrottled returns the n callers denied most under a rule in the
// last hour, the most first.
func (r *Recorder) MostThrottled(now time.Time, n int) []Caller {
	out := r.callers.list(now)
	slices.SortFunc(out, func(a, b Caller) int {
		return cmp.Or(cmp.Compare(b.Hour, a.Hour), b.Last.Compare(a.Last), strings.Compare(a.Rule, b.Rule), strings.Compare(a.Identifier, b.Identifier))
	})
	return out[:min(n, len(out))]
}
