package traffic

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rules"
)

// Recorder counts an engine's decisions: an engine.Observer (pass it with
// engine.WithObserver) whose Tick, called once a second, fills the rings
// the page reads. It is safe for concurrent use.
type Recorder struct {
	total   *series
	rules   atomic.Pointer[map[string]*series]
	cache   idCache
	callers *callers

	mu       sync.Mutex // the rings; adding a rule to the map
	lastTick time.Time
}

// maxCallers bounds the table of warned and throttled callers.
const maxCallers = 10_000

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder {
	r := &Recorder{total: newSeries(), callers: newCallers(maxCallers)}
	m := map[string]*series{}
	r.rules.Store(&m)
	return r
}

// Decided counts ev's decision: under each rule that applied, by its
// outcome, and for the instance, once, by the worst. Peeks, errors and
// repeats are not counted, nor a rule's answer made by the store's failure
// policy (failed open or closed, or by the fallback limiter): the metrics
// count those. A check no rule applied to is allowed.
func (r *Recorder) Decided(_ context.Context, ev *engine.Event) {
	d := ev.Decision
	if d == nil || ev.Kind == engine.KindPeek || d.Repeat {
		return
	}
	worst, counted := Allowed, len(d.Results) == 0
	for i := range d.Results {
		o, ok := outcomeOf(d, i)
		if !ok {
			continue
		}
		r.seriesOf(d.Results[i].Policy).live.inc(o)
		worst, counted = max(worst, o), true
	}
	if !counted {
		return
	}
	r.total.live.inc(worst)
	if worst >= ShadowDenied {
		r.callers.record(ev)
	}
}

// outcomeOf is the outcome of d.Results[i], false when it is none the
// page counts.
func outcomeOf(d *core.Decision, i int) (Outcome, bool) {
	switch d.Outcome(i) {
	case core.OutcomeAllowed:
		return Allowed, true
	case core.OutcomeWarning:
		return Warned, true
	case core.OutcomeShadowDenied:
		return ShadowDenied, true
	case core.OutcomeDenied:
		return Denied, true
	}
	return 0, false
}

// seriesOf returns rule id's series: from the cache when id is the string
// it holds (the engine's rule ID, the same string in every decision of a
// snapshot), else from the map, else added.
func (r *Recorder) seriesOf(id string) *series {
	if s := r.cache.get(id); s != nil {
		return s
	}
	s := (*r.rules.Load())[id]
	if s == nil {
		s = r.addRule(id)
	}
	r.cache.put(id, s)
	return s
}

// addRule returns the series of rule id, adding it (once per rule: the
// map is copied, then swapped in).
func (r *Recorder) addRule(id string) *series {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := *r.rules.Load()
	if s := old[id]; s != nil {
		return s
	}
	m := make(map[string]*series, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	s := newSeries()
	m[strings.Clone(id)] = s
	r.rules.Store(&m)
	return s
}

// Reloaded empties the cache of rule IDs when new rules are in force (a
// new snapshot's IDs are new strings). A rule's series is made by its
// first decision, and dropped by Tick after an hour without one.
func (r *Recorder) Reloaded(_ *rules.Snapshot, err error) {
	if err == nil {
		r.cache.clear()
	}
}

var _ engine.Observer = (*Recorder)(nil)

// Tick moves what the running totals gained since the last tick into the
// second in the middle of the span between the two ticks, or of the
// second before now when the last tick is longer ago (the first tick; a
// stalled sampler), and drops the series of the rules without
// a decision for an hour. Run calls it once a second; tests call it on
// their clock.
func (r *Recorder) Tick(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev := r.lastTick
	if prev.IsZero() || !prev.Before(now) {
		prev = now.Add(-time.Second)
	}
	r.lastTick = now
	sec := floorDiv(now.Add(-min(now.Sub(prev), time.Second)/2).UnixNano(), int64(time.Second))
	r.total.sample(sec)
	old := *r.rules.Load()
	var idle []string
	for id, s := range old {
		if s.lastCount == 0 {
			s.lastCount = sec // a new series: an hour from now at the earliest
		}
		if !s.sample(sec) && sec-s.lastCount > int64(time.Hour/time.Second)+60 {
			idle = append(idle, id)
		}
	}
	if len(idle) > 0 {
		// A decision that found a series just before it is dropped counts
		// into it and is lost: one, after an hour without any.
		r.cache.clear()
		m := make(map[string]*series, len(old))
		for k, v := range old {
			m[k] = v
		}
		for _, id := range idle {
			delete(m, id)
		}
		r.rules.Store(&m)
	}
}

// Run calls Tick just after each whole second until ctx ends.
func (r *Recorder) Run(ctx context.Context, now func() time.Time) {
	if now == nil {
		now = time.Now
	}
	for {
		t := now()
		wait := t.Truncate(time.Second).Add(time.Second + 5*time.Millisecond).Sub(t)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		r.Tick(now())
	}
}

// View is the counts of one rule, or of the whole instance: per second
// over the last minute and per minute over the last hour.
type View struct {
	// Seconds are the 60 whole seconds before now, the first at
	// FirstSecond.
	Seconds     []Counts
	FirstSecond time.Time
	// Minutes are the 60 minutes up to now's (under way), the first at
	// FirstMinute.
	Minutes     []Counts
	FirstMinute time.Time
	// Hour is the sum of Minutes.
	Hour Counts
}

// Instance returns the whole instance's counts at now.
func (r *Recorder) Instance(now time.Time) View {
	r.mu.Lock()
	defer r.mu.Unlock()
	return viewOf(r.total, now)
}

// Rule returns rule id's counts at now (none when it has had no decision
// for an hour).
func (r *Recorder) Rule(id string, now time.Time) View {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := (*r.rules.Load())[id]
	if s == nil {
		s = newSeries()
	}
	return viewOf(s, now)
}

// Hours returns each rule's counts over the last hour, by rule ID (the
// rules without a decision in the hour are absent).
func (r *Recorder) Hours(now time.Time) map[string]Counts {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]Counts{}
	first := lastSecond(now)/60 - 59
	for id, s := range *r.rules.Load() {
		var c Counts
		for m := first; m < first+60; m++ {
			c.Add(s.mins.at(m))
		}
		if c.Total() > 0 {
			out[id] = c
		}
	}
	return out
}

// minute returns the instance's counts and each rule's (those counted)
// in minute m.
func (r *Recorder) minute(m int64) (Counts, map[string]Counts) {
	r.mu.Lock()
	defer r.mu.Unlock()
	byRule := map[string]Counts{}
	for id, s := range *r.rules.Load() {
		if c := s.mins.at(m); c.Total() > 0 {
			byRule[id] = c
		}
	}
	return r.total.mins.at(m), byRule
}

// lastSecond is the last whole second before now.
func lastSecond(now time.Time) int64 {
	return floorDiv(now.UnixNano(), int64(time.Second)) - 1
}

func viewOf(s *series, now time.Time) View {
	last := lastSecond(now)
	v := View{Seconds: make([]Counts, 60), Minutes: make([]Counts, 60),
		FirstSecond: time.Unix(last-59, 0).UTC(), FirstMinute: time.Unix((floorDiv(last, 60)-59)*60, 0).UTC()}
	for i := range v.Seconds {
		v.Seconds[i] = s.seconds.at(last - 59 + int64(i))
	}
	first := floorDiv(last, 60) - 59
	for i := range v.Minutes {
		v.Minutes[i] = s.mins.at(first + int64(i))
		v.Hour.Add(v.Minutes[i])
	}
	return v
}
