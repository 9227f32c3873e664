package limitertest

import "github.com/sluicehq/sluice/core"

// InvalidLimit is a Limit that core.Limit.Validate refuses, and how.
type InvalidLimit struct {
	// Limit is the refused limit.
	Limit core.Limit
	// Field is the field its *core.FieldError names: "Algorithm", "Rate",
	// "Period" or "Burst".
	Field string
	// Check numbers the check of Validate it fails first, from 0, in the
	// order Validate makes them.
	Check int
}

// InvalidLimits returns one Limit for each way core.Limit.Validate refuses
// a limit: generated from Validate's own checks (core's tests keep it in
// step), so a new check brings its case here. A Store refuses each with an
// error wrapping core.ErrInvalidLimit whose *core.FieldError names the
// op's Limit field ("ops[0].Limit.Rate"); a front door that reads limits
// from its own format refuses each it can express, naming the same field.
func InvalidLimits() []InvalidLimit { return append([]InvalidLimit(nil), invalidLimits[:]...) }
