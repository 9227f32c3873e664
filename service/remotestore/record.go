package remotestore

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/ratelimitv1"
)

// The actions of the store API's admin changes, as audit rows name them.
const (
	ActionReset         = "store.reset"
	ActionOverrideSet   = "store.override.set"
	ActionOverrideClear = "store.override.clear"
)

// unrecordedMessage is the only text a client gets when its change could
// not be recorded (and so was not made, or must be retried).
const unrecordedMessage = "the change could not be audited; retry later"

// Change is one admin change of the store API (Reset, SetOverride,
// ClearOverride), for a Recorder to record.
type Change struct {
	// Action is ActionReset, ActionOverrideSet or ActionOverrideClear.
	Action string
	// Key is the key as the client sent it (not namespaced: see
	// ServerKey), and Target its name in a record (see Target).
	Key    core.Key
	Target string
	// Before and After are what the change replaced and set, as JSON
	// values, nil where they do not apply: a Reset's After is the limit
	// the key was forgotten under, a SetOverride's the override; a store
	// has no read of a key's state or override, so Before is nil.
	Before, After any
}

// Recorder records an admin change and makes it: it calls apply (which
// makes the change on the store) at most once and returns apply's error,
// or its own when it could not record the change. A Recorder either
// records the change and applies it, or applies nothing and fails (the
// call is then refused with UNAVAILABLE); apply's error undoes the
// record. It is called concurrently.
type Recorder func(ctx context.Context, c Change, apply func(context.Context) error) error

// applyOnly is the Recorder of a Server without one: it records nothing.
func applyOnly(ctx context.Context, _ Change, apply func(context.Context) error) error {
	return apply(ctx)
}

// newChange returns the Change of action on the key p (as sent).
func newChange(action string, p *ratelimitv1.StoreKey, after, before any) Change {
	k := clientKey(p)
	return Change{Action: action, Key: k, Target: Target(k), Before: before, After: after}
}

// auditLimit is a limit in a Change.
type auditLimit struct {
	Algorithm string `json:"algorithm"`
	Rate      int64  `json:"rate"`
	Period    string `json:"period"`
	Burst     int64  `json:"burst,omitempty"`
}

func auditLimitOf(l *core.Limit) *auditLimit {
	return &auditLimit{Algorithm: l.Algorithm.String(), Rate: l.Rate, Period: l.Period.String(), Burst: l.Burst}
}

// auditReset is a Reset in a Change.
type auditReset struct {
	Limit *auditLimit `json:"limit"`
}

// auditOverride is an override in a Change.
type auditOverride struct {
	Limit *auditLimit `json:"limit,omitempty"`
	Block bool        `json:"block,omitempty"`
	Until time.Time   `json:"until"`
}
