package traffic

import (
	"sync/atomic"
)

// Outcome is what a check got under one rule, as the page counts it.
type Outcome uint8

// The outcomes counted, from the mildest: a check counted for the whole
// instance is counted once, under the worst outcome of its rules.
const (
	// Allowed: admitted, the caller's counter in the Normal state.
	Allowed Outcome = iota
	// Warned: admitted, the caller's counter in the Warning state (its
	// usage above the rule's warning threshold, 80% by default).
	Warned
	// ShadowDenied: a shadow rule would have denied the check; it was not
	// denied for it.
	ShadowDenied
	// Denied: the rule denied the check.
	Denied
	// NumOutcomes is the number of outcomes, for arrays indexed by them.
	NumOutcomes
)

var outcomeNames = [NumOutcomes]string{"allowed", "warned", "shadow-denied", "denied"}

// String returns "allowed", "warned", "shadow-denied" or "denied".
func (o Outcome) String() string {
	if o < NumOutcomes {
		return outcomeNames[o]
	}
	return "unknown"
}

// Counts holds a count of each outcome.
type Counts [NumOutcomes]int64

// Add adds c2 to c.
func (c *Counts) Add(c2 Counts) {
	for i := range c {
		c[i] += c2[i]
	}
}

// Total is the sum of every outcome.
func (c Counts) Total() int64 {
	var n int64
	for _, v := range c {
		n += v
	}
	return n
}

// totals are running totals, incremented on the decision path. Each
// counter has a cache line of its own, so that the instance's totals and
// a busy rule's, updated by every check, do not share one.
type totals struct {
	n [NumOutcomes]paddedInt
}

type paddedInt struct {
	atomic.Int64
	_ [56]byte
}

func (t *totals) inc(o Outcome) { t.n[o].Add(1) }

func (t *totals) load() Counts {
	var c Counts
	for i := range c {
		c[i] = t.n[i].Load()
	}
	return c
}

// ring holds the counts of the last len(slots) periods (seconds or
// minutes), each slot tagged with its period: a slot whose tag is not the
// period asked for holds nothing of it.
type ring struct {
	period []int64
	c      []Counts
}

func newRing(n int) ring { return ring{period: make([]int64, n), c: make([]Counts, n)} }

// add adds c to period p.
func (r *ring) add(p int64, c Counts) {
	i := int(p % int64(len(r.period)))
	if r.period[i] != p {
		r.period[i], r.c[i] = p, Counts{}
	}
	r.c[i].Add(c)
}

// at returns the counts of period p.
func (r *ring) at(p int64) Counts {
	i := int(p % int64(len(r.period)))
	if p < 0 || r.period[i] != p {
		return Counts{}
	}
	return r.c[i]
}

// series is the counts of one rule, or of the whole instance.
type series struct {
	live totals
	// Guarded by Recorder.mu: what live held at the last tick, and the
	// rings the sampler moves the gains into.
	seen          Counts
	seconds, mins ring
	lastCount     int64 // the second of the last tick that found a gain
}

func newSeries() *series {
	return &series{seconds: newRing(ringLen), mins: newRing(ringLen)}
}

// ringLen is the length of both rings: 60 periods shown and the one being
// filled.
const ringLen = 61

// sample moves what s.live gained since the last sample into second sec
// and its minute; it reports whether there was a gain.
func (s *series) sample(sec int64) bool {
	now := s.live.load()
	var d Counts
	gained := false
	for i := range d {
		d[i] = now[i] - s.seen[i]
		gained = gained || d[i] != 0
	}
	if !gained {
		return false
	}
	s.seen = now
	s.seconds.add(sec, d)
	s.mins.add(floorDiv(sec, 60), d)
	s.lastCount = sec
	return true
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
