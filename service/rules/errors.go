package rules

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/rulefile"
)

// RuleError is the refusal of one rule of a snapshot (see New): the rule
// it names, and the *core.FieldError naming the field at fault as the
// rules file names it ("name", "dimension", "endpoint_pattern", "limit",
// "tiers.gold.burst"). errors.As finds both: a source that keeps rules in
// another form (a database) renames the field into its own.
type RuleError struct {
	// ID is the rule's ID.
	ID string
	// Err names the field and says what is wrong with it.
	Err *core.FieldError
}

// Error returns `rule "ID": field: message`.
func (e *RuleError) Error() string { return fmt.Sprintf("rule %q: %v", e.ID, e.Err) }

// Unwrap returns Err.
func (e *RuleError) Unwrap() error { return e.Err }

// limitFields are the rules file's names of the fields of core.Limit,
// which core's *FieldError names by their Go names.
var limitFields = map[string]string{
	"Algorithm": rulefile.FieldAlgorithm, "Rate": rulefile.FieldLimit,
	"Period": rulefile.FieldWindowSeconds, "Burst": rulefile.FieldBurst,
}

// limitField returns the *core.FieldError of err, a refusal of
// core.Limit.Validate, with its field named as the rules file names it
// under path ("tiers.gold" and Burst: "tiers.gold.burst"); it names path
// when err names no field of a limit.
func limitField(err error, path string) *core.FieldError {
	var cf *core.FieldError
	if !errors.As(err, &cf) || limitFields[cf.Field] == "" {
		return &core.FieldError{Field: path, Message: err.Error(), Err: core.ErrInvalidLimit}
	}
	return (&core.FieldError{Field: limitFields[cf.Field], Message: cf.Message, Err: cf.Err}).In(path)
}

// message is what err, a refusal of core's validation, says is wrong,
// without the field its *core.FieldError names (for the caller, which
// names the field in its own words); the whole text for another error.
func message(err error) string {
	var fe *core.FieldError
	if errors.As(err, &fe) {
		return fe.Message
	}
	return err.Error()
}
