package adminapi

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// caller reads a users resource's identifier (the path's {id}) and its
// dimension (?dimension=, "user" by default); known lists the other query
// parameters the resource takes.
func caller(r *http.Request, known ...string) (dimension, identifier string, q query, e *apiError) {
	q, e = readQuery(r, append([]string{"dimension"}, known...)...)
	if e != nil {
		return "", "", q, e
	}
	dimension = "user"
	if q.has("dimension") {
		dimension = q.get("dimension")
		if m := validDimension(dimension); m != "" {
			return "", "", q, bad("dimension", "%s", m)
		}
	}
	identifier = r.PathValue("id")
	switch {
	case identifier == "":
		return "", "", q, bad("id", "required: the caller's identifier")
	case len(identifier) > engine.MaxIdentifier:
		return "", "", q, bad("id", "longer than %d bytes", engine.MaxIdentifier)
	case !utf8.ValidString(identifier):
		return "", "", q, bad("id", "not valid UTF-8")
	case strings.IndexByte(identifier, 0) >= 0:
		return "", "", q, bad("id", "must not contain a NUL byte")
	}
	return dimension, identifier, q, nil
}

// tierBody is the body of PUT /users/{id}/tier.
type tierBody struct {
	// Tier is the tier to assign; "" clears the assignment.
	Tier *string `json:"tier"`
}

func (a *api) putTier(w http.ResponseWriter, r *http.Request) *apiError {
	dim, id, _, e := caller(r)
	if e != nil {
		return e
	}
	actor, e := a.actor(r)
	if e != nil {
		return e
	}
	var b tierBody
	if e := readJSON(w, r, &b); e != nil {
		return e
	}
	if b.Tier == nil {
		return bad("tier", "required: a tier name, or \"\" to clear the assignment")
	}
	if m := validTier(*b.Tier); m != "" {
		return bad("tier", "%s", m)
	}
	rev, err := a.db.SetTier(r.Context(), actor, dim, id, *b.Tier)
	if errors.Is(err, rulesdb.ErrInvalid) {
		return storeError(http.StatusBadRequest, err, false)
	}
	if err != nil {
		return a.failed(r, "set tier", err)
	}
	if e := a.inForce(r, rev); e != nil {
		return e
	}
	writeJSON(w, http.StatusOK, rulesdb.TierAssignment{Dimension: dim, Identifier: id, Tier: *b.Tier})
	return nil
}

// overrideBody is the body of POST /users/{id}/override.
type overrideBody struct {
	RuleID        *string `json:"rule_id"`
	Limit         *int64  `json:"limit"`
	WindowSeconds *int64  `json:"window_seconds"`
	Block         *bool   `json:"block"`
	ExpiresAt     *string `json:"expires_at"`
	TTLSeconds    *int64  `json:"ttl_seconds"`
}

// overrideList is the answer of GET /users/{id}/override.
type overrideList struct {
	Overrides []rulesdb.Override `json:"overrides"`
}

func (a *api) listOverrides(w http.ResponseWriter, r *http.Request) *apiError {
	dim, id, _, e := caller(r)
	if e != nil {
		return e
	}
	ovs, err := a.db.Overrides(r.Context(), dim, id, a.now())
	if err != nil {
		return a.failed(r, "list overrides", err)
	}
	if ovs == nil {
		ovs = []rulesdb.Override{}
	}
	writeJSON(w, http.StatusOK, overrideList{Overrides: ovs})
	return nil
}

func (a *api) postOverride(w http.ResponseWriter, r *http.Request) *apiError {
	dim, id, _, e := caller(r)
	if e != nil {
		return e
	}
	actor, e := a.actor(r)
	if e != nil {
		return e
	}
	var b overrideBody
	if e := readJSON(w, r, &b); e != nil {
		return e
	}
	now := a.now()
	o, e := b.override(dim, id, now)
	if e != nil {
		return e
	}
	rule, e := a.overridden(r, o)
	if e != nil {
		return e
	}
	if !o.Block {
		alg, err := core.ParseAlgorithm(rule.Algorithm)
		if err != nil {
			return a.failed(r, "override", fmt.Errorf("stored rule %q: %w", rule.ID, err))
		}
		l := core.Limit{Algorithm: alg, Rate: o.Limit, Period: time.Duration(o.WindowSeconds) * time.Second}
		if err := l.Validate(); err != nil {
			fe := rulesdb.LimitField(err)
			field := fe.Field
			if field == "burst" { // an override's limit is its burst too
				field = "limit"
			}
			return bad(field, "%s (under the rule's %s)", fe.Message, rule.Algorithm)
		}
	}
	rev, err := a.db.SetOverride(r.Context(), actor, o)
	if errors.Is(err, rulesdb.ErrInvalid) {
		return storeError(http.StatusBadRequest, err, false)
	}
	if err != nil {
		return a.failed(r, "set override", err)
	}
	if e := a.inForce(r, rev); e != nil {
		return e
	}
	w.Header().Set("Location", locationOf("/users/%s/override/%s?dimension=%s", url.PathEscape(id), o.RuleID, url.QueryEscape(dim)))
	writeJSON(w, http.StatusCreated, a.storedOverride(r, o, now))
	return nil
}

// overridden returns the stored rule o overrides, or a 400 naming the
// field when it has none o can override: a rule of o's dimension, enabled,
// without a tier.
func (a *api) overridden(r *http.Request, o rulesdb.Override) (*rulesdb.Rule, *apiError) {
	rule, err := a.db.Get(r.Context(), o.RuleID)
	switch {
	case errors.Is(err, rulesdb.ErrNotFound):
		return nil, bad("rule_id", "no rule %q", o.RuleID)
	case err != nil:
		return nil, a.failed(r, "get rule", err)
	case rule.Tier != "":
		return nil, bad("rule_id", "rule %q is the %q tier's row of a rule: override the rule without a tier", o.RuleID, rule.Tier)
	case !rule.Enabled:
		return nil, bad("rule_id", "rule %q is disabled: an override of it would never apply", o.RuleID)
	case rule.Dimension != o.Dimension:
		return nil, bad("dimension", "rule %q limits dimension %q, not %q", o.RuleID, rule.Dimension, o.Dimension)
	}
	return rule, nil
}

// storedOverride is o as stored (its created_at and revision), read back
// at now; the write has committed, so a failure to read it back answers
// what was asked, at the precision stored.
func (a *api) storedOverride(r *http.Request, o rulesdb.Override, now time.Time) rulesdb.Override {
	stored := o
	stored.ExpiresAt = time.UnixMilli(o.ExpiresAt.UnixMilli()).UTC()
	ovs, err := a.db.Overrides(r.Context(), o.Dimension, o.Identifier, now)
	if err != nil && r.Context().Err() == nil {
		a.log.LogAttrs(r.Context(), slog.LevelWarn, "adminapi: reading back a stored override failed",
			slog.String("path", r.URL.Path), slog.Any("error", err))
	}
	for _, s := range ovs {
		if s.RuleID == o.RuleID {
			stored = s
		}
	}
	return stored
}

// override checks b and returns the override it asks for, or a 400 naming
// every field at fault. The expiry must be in the future, at most
// MaxOverrideTTL after now.
func (b *overrideBody) override(dim, id string, now time.Time) (rulesdb.Override, *apiError) {
	var e errs
	o := rulesdb.Override{Dimension: dim, Identifier: id}
	switch {
	case b.RuleID == nil:
		e.add("rule_id", "required: the rule to override")
	default:
		o.RuleID = *b.RuleID
		if err := core.ValidatePolicyName(o.RuleID); err != nil {
			e.addField("rule_id", refusal(err))
		}
	}
	if b.Block != nil {
		o.Block = *b.Block
	}
	if o.Block {
		if b.Limit != nil {
			e.add("limit", "a block has no limit: leave it out")
		}
		if b.WindowSeconds != nil {
			e.add("window_seconds", "a block has no window: leave it out")
		}
	} else {
		if b.Limit == nil {
			e.add("limit", "required (or \"block\": true)")
		} else if o.Limit = *b.Limit; o.Limit < 1 {
			e.add("limit", "must be at least 1, got %d", o.Limit)
		}
		if b.WindowSeconds == nil {
			e.add("window_seconds", "required (or \"block\": true)")
		} else if o.WindowSeconds = *b.WindowSeconds; o.WindowSeconds < 1 || o.WindowSeconds > maxWindow {
			e.add("window_seconds", "must be 1 to %d, got %d", maxWindow, o.WindowSeconds)
		}
	}
	o.ExpiresAt = b.expiry(&e, now)
	return o, e.err()
}

// expiry is the instant b's override lapses, from its expires_at or
// ttl_seconds (exactly one is required): after now, at most
// MaxOverrideTTL after. What is wrong is added to e (the zero time
// returned).
func (b *overrideBody) expiry(e *errs, now time.Time) time.Time {
	maxTTL := int64(MaxOverrideTTL / time.Second)
	switch {
	case b.ExpiresAt != nil && b.TTLSeconds != nil:
		e.add("ttl_seconds", "give expires_at or ttl_seconds, not both")
	case b.TTLSeconds != nil:
		if ttl := *b.TTLSeconds; ttl < 1 || ttl > maxTTL {
			e.add("ttl_seconds", "must be 1 to %d (30 days), got %d", maxTTL, ttl)
		} else {
			return now.Add(time.Duration(ttl) * time.Second).UTC()
		}
	case b.ExpiresAt != nil:
		t, err := time.Parse(time.RFC3339Nano, *b.ExpiresAt)
		switch {
		case err != nil:
			e.add("expires_at", "must be an RFC 3339 time (2026-11-24T12:00:00Z), got %q", clip(*b.ExpiresAt))
		case !t.After(now):
			e.add("expires_at", "must be in the future, got %s", t.UTC().Format(time.RFC3339))
		case t.Sub(now) > MaxOverrideTTL:
			e.add("expires_at", "must be at most 30 days ahead, got %s", t.UTC().Format(time.RFC3339))
		default:
			return t.UTC()
		}
	default:
		e.add("expires_at", "required: expires_at (RFC 3339) or ttl_seconds")
	}
	return time.Time{}
}

func (a *api) deleteOverride(w http.ResponseWriter, r *http.Request) *apiError {
	dim, id, _, e := caller(r)
	if e != nil {
		return e
	}
	actor, e := a.actor(r)
	if e != nil {
		return e
	}
	rule := r.PathValue("rule")
	if core.ValidatePolicyName(rule) != nil {
		return fail(http.StatusNotFound, "rule", "no override of rule %q", clip(rule))
	}
	rev, err := a.db.ClearOverride(r.Context(), actor, dim, id, rule)
	if errors.Is(err, rulesdb.ErrNotFound) {
		return fail(http.StatusNotFound, "rule", "no override of rule %q for %s %q", rule, dim, clip(id))
	}
	if err != nil {
		return a.failed(r, "clear override", err)
	}
	if e := a.inForce(r, rev); e != nil {
		return e
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
