package rulesdb

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/rules"
)

// ErrInvalid wraps every refusal of a rule that the engine would reject,
// and every invalid argument of a write. The refusal holds a
// *core.FieldError (see errors.As) naming the field as a Rule's (or an
// Override's) JSON member ("endpoint_pattern", "window_seconds",
// "identifier"), and, when it is about one rule, a *rules.RuleError naming
// the rule; joined refusals (errors.Join) each hold their own.
var ErrInvalid = errors.New("rulesdb: invalid rule")

// invalidRule is the refusal of field of rule id.
func invalidRule(id, field, format string, args ...any) error {
	return ruleError(id, &core.FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

// ruleError is the refusal fe of rule id, wrapping ErrInvalid.
func ruleError(id string, fe *core.FieldError) error {
	return fmt.Errorf("%w: %w", ErrInvalid, &rules.RuleError{ID: id, Err: fe})
}

// invalidField is the refusal of field of a write about no one rule (an
// override's, a tier assignment's), wrapping ErrInvalid.
func invalidField(field, format string, args ...any) error {
	return fmt.Errorf("%w: %w", ErrInvalid, &core.FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

// limitFields are a Rule's names of the fields of core.Limit.
var limitFields = map[string]string{"Algorithm": "algorithm", "Rate": "limit", "Period": "window_seconds", "Burst": "burst"}

// LimitField returns the *core.FieldError of err, a refusal of
// core.Limit.Validate or core.ParseAlgorithm, with the field named as a
// Rule's JSON member: algorithm, limit, window_seconds or burst (an error
// naming no field of a limit names limit).
func LimitField(err error) *core.FieldError {
	var fe *core.FieldError
	if !errors.As(err, &fe) || limitFields[fe.Field] == "" {
		return &core.FieldError{Field: "limit", Message: err.Error(), Err: core.ErrInvalidLimit}
	}
	return &core.FieldError{Field: limitFields[fe.Field], Message: fe.Message, Err: fe.Err}
}

// snapshotFields are a Rule's (or an Override's) names of the fields a
// refusal of rules.New names as the rules file does, where they differ;
// a path is renamed by its first name ("tiers.gold.burst": tier).
var snapshotFields = map[string]string{"name": "id", "tiers": "tier", "tier_assignments": "dimension"}

// fromSnapshot is err, a refusal of rules.New (joined refusals, each a
// *core.FieldError, of a rule or not), with each field named as a Rule or
// an Override names it, wrapping ErrInvalid.
func fromSnapshot(err error) error {
	list := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		list = j.Unwrap()
	}
	out := make([]error, 0, len(list))
	for _, e := range list {
		var re *rules.RuleError
		var fe *core.FieldError
		switch {
		case errors.As(e, &re):
			out = append(out, ruleError(re.ID, dbField(re.Err)))
		case errors.As(e, &fe):
			out = append(out, fmt.Errorf("%w: %w", ErrInvalid, dbField(fe)))
		default:
			out = append(out, fmt.Errorf("%w: %w", ErrInvalid, e))
		}
	}
	return errors.Join(out...)
}

// dbField is fe with its path named as a Rule or an Override names it: an
// override's field (overrides[2].identifier) by its own name.
func dbField(fe *core.FieldError) *core.FieldError {
	path := fe.Field
	if rest, ok := strings.CutPrefix(path, "overrides["); ok {
		if _, f, ok := strings.Cut(rest, "]."); ok {
			path = f
		}
	}
	first := path
	if i := strings.IndexAny(path, ".["); i >= 0 {
		first = path[:i]
	}
	if name, ok := snapshotFields[first]; ok {
		path = name
	}
	return &core.FieldError{Field: path, Message: fe.Message, Err: fe.Err}
}
