package core

import "fmt"

// Outcome names what happened to a request under one policy: the label of
// metrics and traces.
type Outcome uint8

// The outcomes, from the most common.
const (
	// OutcomeAllowed: admitted, the key in the Normal state.
	OutcomeAllowed Outcome = iota
	// OutcomeWarning: admitted, the key in the Warning state.
	OutcomeWarning
	// OutcomeDenied: denied by the policy.
	OutcomeDenied
	// OutcomeShadowDenied: a shadow policy would have denied the request.
	OutcomeShadowDenied
	// OutcomeRepeat: the request repeated an admitted one (same
	// idempotency key) and passed without being counted.
	OutcomeRepeat
	// OutcomeFailedOpen: the store failed and the request was allowed.
	OutcomeFailedOpen
	// OutcomeFailedClosed: the store failed and the request was denied.
	OutcomeFailedClosed
	// OutcomeFallback: the store failed and a local limiter decided.
	OutcomeFallback
	// NumOutcomes is the number of outcomes, for tables indexed by them.
	NumOutcomes
)

var outcomeNames = [NumOutcomes]string{
	OutcomeAllowed:      "allowed",
	OutcomeWarning:      "warning",
	OutcomeDenied:       "denied",
	OutcomeShadowDenied: "shadow_denied",
	OutcomeRepeat:       "repeat",
	OutcomeFailedOpen:   "failed_open",
	OutcomeFailedClosed: "failed_closed",
	OutcomeFallback:     "fallback",
}

// String returns the outcome's label: "allowed", "warning", "denied",
// "shadow_denied", "repeat", "failed_open", "failed_closed" or "fallback".
func (o Outcome) String() string {
	if o < NumOutcomes {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Outcome classifies d.Results[i]: a failure policy's answer first, then a
// repeat, a shadow denial, a denial, the Warning state.
func (d *Decision) Outcome(i int) Outcome {
	p := &d.Results[i]
	switch {
	case p.Source == FailedOpen:
		return OutcomeFailedOpen
	case p.Source == FailedClosed:
		return OutcomeFailedClosed
	case p.Source == FromFallback:
		return OutcomeFallback
	case d.Repeat:
		return OutcomeRepeat
	case p.ShadowDenied():
		return OutcomeShadowDenied
	case !p.Allowed:
		return OutcomeDenied
	case p.State == Warning:
		return OutcomeWarning
	}
	return OutcomeAllowed
}
