package adminapi

import (
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/engine"
)

// Limits is the answer of GET /users/{id}/limits: every rule of the
// caller's dimension in force (on every endpoint), with the limit that
// applies to the caller and the caller's usage now.
type Limits struct {
	// Dimension and Identifier name the caller.
	Dimension  string `json:"dimension"`
	Identifier string `json:"identifier"`
	// Tier is the caller's tier in the rules in force ("" none).
	Tier string `json:"tier"`
	// Revision is the revision of the rules in force.
	Revision string `json:"revision"`
	// Limits holds one entry per rule, in the rules' order.
	Limits []RuleLimit `json:"limits"`
}

// RuleLimit is where the caller stands under one rule.
type RuleLimit struct {
	// RuleID names the rule; EndpointPatterns are its endpoint patterns
	// (empty: every endpoint); Shadow rules never deny.
	RuleID           string   `json:"rule_id"`
	EndpointPatterns []string `json:"endpoint_patterns"`
	Shadow           bool     `json:"shadow"`
	// Tier is the caller's tier ("" none), whether or not the rule has a
	// limit for it.
	Tier string `json:"tier"`
	// Source says where the limit in force comes from: "rule", "tier"
	// (the rule's limit for the caller's tier), "override", "unlimited" or
	// "deny" (rules of a rules file).
	Source string `json:"source"`
	// Algorithm, Limit, WindowSeconds and Burst are the limit in force for
	// the caller (zero for a block or an unlimited rule).
	Algorithm     string  `json:"algorithm"`
	Limit         int64   `json:"limit"`
	WindowSeconds float64 `json:"window_seconds"`
	Burst         int64   `json:"burst"`
	// Override is the caller's override of the rule in force; null when
	// none.
	Override *LimitOverride `json:"override"`
	// Blocked: every check of the caller under the rule is denied.
	Blocked bool `json:"blocked"`
	// Capacity, Remaining and Used are the caller's counter now (peeked:
	// reading consumes nothing).
	Capacity  int64 `json:"capacity"`
	Remaining int64 `json:"remaining"`
	Used      int64 `json:"used"`
	// ResetAt is when the counter is full again; null when the rule counts
	// nothing.
	ResetAt *time.Time `json:"reset_at"`
	// State is "normal", "warning" (above 80% used) or "throttled".
	State string `json:"state"`
}

// LimitOverride is the override in force of a rule for the caller.
type LimitOverride struct {
	Limit         int64     `json:"limit"`
	WindowSeconds float64   `json:"window_seconds"`
	Block         bool      `json:"block"`
	ExpiresAt     time.Time `json:"expires_at"`
	Revision      int64     `json:"revision"`
}

func (a *api) limits(w http.ResponseWriter, r *http.Request) *apiError {
	dim, id, _, e := caller(r)
	if e != nil {
		return e
	}
	snap := a.eng.Snapshot()
	us, err := a.eng.Usage(r.Context(), dim, id)
	if errors.Is(err, engine.ErrInvalid) {
		var fe *core.FieldError
		switch {
		case !errors.As(err, &fe):
			return bad("dimension", "invalid")
		case fe.Field == "identifier": // the path's id
			return bad("id", "%s", fe.Message)
		}
		return bad(fe.Field, "%s", fe.Message)
	}
	if err != nil {
		if r.Context().Err() == nil {
			a.log.LogAttrs(r.Context(), slog.LevelError, "adminapi: usage failed", slog.String("path", r.URL.Path), slog.Any("error", err))
		}
		return &apiError{status: http.StatusServiceUnavailable, detail: "the rate-limit store is unavailable; try again"}
	}
	out := Limits{Dimension: dim, Identifier: id, Tier: snap.TierOf(dim, id), Revision: snap.Revision(), Limits: []RuleLimit{}}
	for _, u := range us {
		l := RuleLimit{
			RuleID: u.Rule.ID, EndpointPatterns: u.Rule.Endpoints, Shadow: u.Rule.Shadow, Tier: u.Tier, Source: "rule",
			Blocked: u.Blocked, Capacity: u.Capacity, Remaining: u.Remaining, Used: u.Used, State: u.State.String(),
		}
		if l.EndpointPatterns == nil {
			l.EndpointPatterns = []string{}
		}
		if u.Limit != (core.Limit{}) {
			l.Algorithm, l.Limit, l.WindowSeconds, l.Burst = u.Limit.Algorithm.String(), u.Limit.Rate, u.Limit.Period.Seconds(), u.Limit.Burst
		}
		switch {
		case u.Rule.Unlimited:
			l.Source = "unlimited"
		case u.Rule.Deny:
			l.Source = "deny"
		case u.Override != nil:
			o := u.Override
			l.Source = "override"
			l.Override = &LimitOverride{Limit: o.Limit.Rate, WindowSeconds: o.Limit.Period.Seconds(), Block: o.Blocks(),
				ExpiresAt: o.Until.UTC(), Revision: o.Revision}
		case u.Tier != "":
			if _, ok := u.Rule.Tiers[u.Tier]; ok {
				l.Source = "tier"
			}
		}
		if !u.ResetAt.IsZero() {
			t := u.ResetAt.UTC()
			l.ResetAt = &t
		}
		out.Limits = append(out.Limits, l)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
