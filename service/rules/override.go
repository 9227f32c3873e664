package rules

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core"
)

// maxOverrideIdentifier bounds an override's identifier, in bytes.
const maxOverrideIdentifier = 1024

// Override is a temporary limit (or block) of one rule for one caller.
// The engine applies the overrides of the snapshot in force through
// core (Limiter.SetOverride and Block); one lapses at Until in the store,
// with no reload.
type Override struct {
	// RuleID names a native rule of the snapshot.
	RuleID string
	// Dimension must be the rule's dimension.
	Dimension string
	// Identifier is the caller the override is for: 1 to 1024 bytes.
	Identifier string
	// Limit replaces the rule's (and the caller's tier's) limit; the zero
	// Limit blocks the caller.
	Limit core.Limit
	// Until is the instant the override lapses.
	Until time.Time
	// Revision is the database revision that wrote the override (0 when
	// it comes from a file).
	Revision int64
	// Cleared marks the tombstone of an override ended before its time
	// (a database keeps it until the override's expiry): its Until is
	// the clear, already past, so it is lapsed to every reader, and the
	// engine removes it from the store once, even if it never set it (an
	// instance started after the clear, on a store that outlives
	// instances).
	Cleared bool
}

// Blocks reports whether o blocks its caller (its Limit is zero).
func (o Override) Blocks() bool { return o.Limit == (core.Limit{}) }

// Active reports whether o is still in force at now (a Cleared one never is).
func (o Override) Active(now time.Time) bool { return !o.Cleared && now.Before(o.Until) }

// overrideKey is what identifies an override in a snapshot.
type overrideKey struct{ rule, dimension, identifier string }

// addOverrides validates the overrides given to New and indexes them; it
// returns one error per bad field, named overrides[i].field.
func (s *Snapshot) addOverrides(overrides []Override) []error {
	var errs []error
	bad := func(i int, field, format string, args ...any) {
		fe := &core.FieldError{Field: fmt.Sprintf("overrides[%d].%s", i, field), Message: fmt.Sprintf(format, args...)}
		errs = append(errs, fmt.Errorf("rules: %w", fe))
	}
	s.overrides = overrides
	if len(overrides) > 0 {
		s.byOverride = make(map[overrideKey]int, len(overrides))
	}
	for i, o := range overrides {
		r, ok := s.byID[o.RuleID]
		switch {
		case o.RuleID == "":
			bad(i, "rule_id", "required")
		case !ok:
			bad(i, "rule_id", "no rule %q", o.RuleID)
		case r.Envoy != nil:
			bad(i, "rule_id", "rule %q is an Envoy rule; overrides apply to native rules only", o.RuleID)
		case r.Dimension != o.Dimension:
			bad(i, "dimension", "rule %q is for dimension %q, got %q", o.RuleID, r.Dimension, o.Dimension)
		}
		switch {
		case o.Identifier == "":
			bad(i, "identifier", "required")
		case len(o.Identifier) > maxOverrideIdentifier:
			bad(i, "identifier", "must be at most %d bytes, got %d", maxOverrideIdentifier, len(o.Identifier))
		}
		if !o.Blocks() {
			if err := o.Limit.Validate(); err != nil {
				fe := limitField(err, fmt.Sprintf("overrides[%d]", i))
				errs = append(errs, fmt.Errorf("rules: %w", fe))
			}
		}
		if o.Until.IsZero() {
			bad(i, "until", "required")
		}
		k := overrideKey{o.RuleID, o.Dimension, o.Identifier}
		if prev, dup := s.byOverride[k]; dup {
			bad(i, "identifier", "duplicate override of rule %q for %s %q (first at overrides[%d])", o.RuleID, o.Dimension, o.Identifier, prev)
			continue
		}
		s.byOverride[k] = i
	}
	return errs
}

// Overrides returns every override given to New, in order, expired ones
// included. The slice is shared: do not change it.
func (s *Snapshot) Overrides() []Override { return s.overrides }

// OverrideOf returns the override of rule ruleID for identifier in
// dimension, expired or not (see Override.Active).
func (s *Snapshot) OverrideOf(ruleID, dimension, identifier string) (Override, bool) {
	i, ok := s.byOverride[overrideKey{ruleID, dimension, identifier}]
	if !ok {
		return Override{}, false
	}
	return s.overrides[i], true
}
