package adminui

import (
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/sluicehq/sluice/service/rules"
)

// The caller forms' fields, named as the admin API's members (and the
// users page's query: dimension and id name the caller).
var (
	tierFields     = []string{"dimension", "id", "tier", "remove"}
	overrideFields = []string{"dimension", "id", "rule_id", "kind", "limit", "window_seconds", "ttl_seconds", "expires_at"}
	clearFields    = []string{"dimension", "id", "rule_id", "back"}
)

// userNotices are the notices of ?done= after a caller's change.
var userNotices = map[string]string{
	"tier":     "Tier assigned; in force on this instance.",
	"untier":   "Tier removed; in force on this instance.",
	"override": "Override set; in force on this instance until it expires.",
	"cleared":  "Override cleared; in force on this instance.",
}

// userWrite is the state of the caller page's forms: a notice, or a
// refused form's values and the fields at fault.
type userWrite struct {
	Notice, Top string
	// Form holds the override form's values (its defaults when none was
	// sent).
	Form map[string]string
	// TierErrors and OverrideErrors map each field at fault of the tier
	// and the override form to its message.
	TierErrors, OverrideErrors map[string]string
}

// overrideDefaults are the override form's values before one is sent.
var overrideDefaults = map[string]string{"kind": "block", "ttl_seconds": "3600"}

// userForms adds to a caller's page what its forms need: the rules of the
// caller's dimension in force (an override names one), the tiers they
// define, and uw.
func (h *handler) userForms(data map[string]any, snap *rules.Snapshot, dim string, uw *userWrite) {
	var ids, tiers []string
	for _, rl := range snap.Rules() {
		if rl.Dimension != dim || rl.Domain != "" {
			continue
		}
		ids = append(ids, rl.ID)
		for t := range rl.Tiers {
			if !slices.Contains(tiers, t) {
				tiers = append(tiers, t)
			}
		}
	}
	slices.Sort(ids)
	slices.Sort(tiers)
	if uw.Form == nil {
		uw.Form = overrideDefaults
	}
	if uw.TierErrors == nil {
		uw.TierErrors = map[string]string{}
	}
	if uw.OverrideErrors == nil {
		uw.OverrideErrors = map[string]string{}
	}
	data["RuleIDs"], data["Tiers"], data["Write"] = ids, tiers, uw
}

// userPath is the caller's page, with done's notice.
func userPath(dim, id, done string) string {
	return "/admin/users?" + url.Values{"dimension": {dim}, "id": {id}, "done": {done}}.Encode()
}

// callerPath is the admin API's path of the caller's resource (tier,
// override, override/RULE).
func callerPath(dim, id, resource string) string {
	return "/users/" + url.PathEscape(id) + "/" + resource + "?" + url.Values{"dimension": {dim}}.Encode()
}

// refusedCaller answers a caller's form that the page refuses before the
// API sees it (and reports true): one from a read-scope session, or one
// naming no caller (the page's forms always name one) or one the admin
// API's paths cannot name.
func (h *handler) refusedCaller(w http.ResponseWriter, r *http.Request, q *req) bool {
	switch {
	case !q.canWrite():
		h.message(w, r, q, http.StatusForbidden, "Forbidden: your token has the read scope; changing a caller needs the write scope")
	case r.PostFormValue("id") == "":
		h.message(w, r, q, http.StatusBadRequest, "Bad request: id: required: the caller's identifier")
	case r.PostFormValue("id") == "." || r.PostFormValue("id") == "..":
		// A path segment of . or .. is resolved away before the admin API
		// sees it: no change of such a caller can be sent to it.
		h.message(w, r, q, http.StatusBadRequest, "Bad request: id: \".\" and \"..\" cannot be changed through the admin API (a path segment of its own)")
	default:
		return false
	}
	return true
}

// setTier assigns the form's tier to the caller (or removes the caller's
// tier, for ""), through the admin API's PUT /users/{id}/tier.
func (h *handler) setTier(w http.ResponseWriter, r *http.Request, q *req) {
	if h.refusedCaller(w, r, q) {
		return
	}
	form := formValues(r, tierFields...)
	if form["remove"] != "" { // the form's other button
		form["tier"] = ""
	}
	a := h.callAPI(r, http.MethodPut, callerPath(form["dimension"], form["id"], "tier"), "", map[string]string{"tier": form["tier"]}, tierFields)
	switch a.status {
	case http.StatusOK:
		if msg := h.syncedNow(r, "The tier"); msg != "" {
			h.message(w, r, q, http.StatusServiceUnavailable, msg)
			return
		}
		done := "tier"
		if form["tier"] == "" {
			done = "untier"
		}
		http.Redirect(w, r, userPath(form["dimension"], form["id"], done), http.StatusSeeOther)
	case http.StatusBadRequest:
		h.showUser(w, r, q, http.StatusBadRequest, form["dimension"], form["id"], &userWrite{TierErrors: a.fields, Top: notSaved(a.top)})
	default:
		h.unexpected(w, r, q, "assigning the tier", a)
	}
}

// overrideJSON is the admin API's body of the override form: a block, or a
// limit and window; an expiry in seconds from now or at an instant. errs
// names what the API's JSON cannot carry (a number that is not one, a kind
// that is neither).
func overrideJSON(form map[string]string) (body map[string]any, errs map[string]string) {
	body = map[string]any{"rule_id": form["rule_id"]}
	errs = map[string]string{}
	switch form["kind"] {
	case "block":
		body["block"] = true
	case "limit":
		wholeNumber(body, errs, form, "limit")
		wholeNumber(body, errs, form, "window_seconds")
	default:
		errs["kind"] = "choose block or limit"
	}
	wholeNumber(body, errs, form, "ttl_seconds")
	if v := form["expires_at"]; v != "" {
		body["expires_at"] = instant(v)
	}
	return body, errs
}

// instantLayouts are the times the form takes besides RFC 3339, in UTC:
// the page's own (2026-11-24 12:00:00) and a browser's local date-time
// (2026-11-24T12:00).
var instantLayouts = []string{"2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02T15:04", "2006-01-02T15:04:05"}

// instant is the expires_at of v: v itself, or the RFC 3339 form of a UTC
// time written as the page writes times.
func instant(v string) string {
	for _, l := range instantLayouts {
		if t, err := time.Parse(l, v); err == nil {
			return t.UTC().Format(time.RFC3339)
		}
	}
	return v
}

// setOverride sets the form's override of the caller (a block or a limit,
// with its expiry) through the admin API's POST /users/{id}/override.
func (h *handler) setOverride(w http.ResponseWriter, r *http.Request, q *req) {
	if h.refusedCaller(w, r, q) {
		return
	}
	form := formValues(r, overrideFields...)
	refused := func(errs map[string]string, top string) {
		h.showUser(w, r, q, http.StatusBadRequest, form["dimension"], form["id"], &userWrite{Form: form, OverrideErrors: errs, Top: notSaved(top)})
	}
	body, errs := overrideJSON(form)
	if len(errs) > 0 {
		refused(errs, "")
		return
	}
	a := h.callAPI(r, http.MethodPost, callerPath(form["dimension"], form["id"], "override"), "", body, overrideFields)
	switch a.status {
	case http.StatusCreated:
		var o struct {
			Revision int64 `json:"revision"`
		}
		if err := a.decode(&o); err != nil {
			h.failed(w, r, q, "setting the override", err)
			return
		}
		if msg := h.synced(r, "The override", o.Revision); msg != "" {
			h.message(w, r, q, http.StatusServiceUnavailable, msg)
			return
		}
		http.Redirect(w, r, userPath(form["dimension"], form["id"], "override"), http.StatusSeeOther)
	case http.StatusBadRequest:
		refused(a.fields, a.top)
	default:
		h.unexpected(w, r, q, "setting the override", a)
	}
}

// clearOverride clears the caller's override of the form's rule through
// the admin API's DELETE /users/{id}/override/{rule}, then shows the
// caller (or, for back=overrides, the overrides in force).
func (h *handler) clearOverride(w http.ResponseWriter, r *http.Request, q *req) {
	if h.refusedCaller(w, r, q) {
		return
	}
	form := formValues(r, clearFields...)
	a := h.callAPI(r, http.MethodDelete, callerPath(form["dimension"], form["id"], "override/"+url.PathEscape(form["rule_id"])), "", nil, nil)
	switch a.status {
	case http.StatusNoContent:
		if msg := h.syncedNow(r, "The clearing of the override"); msg != "" {
			h.message(w, r, q, http.StatusServiceUnavailable, msg)
			return
		}
		if form["back"] == "overrides" {
			http.Redirect(w, r, "/admin/overrides?done=cleared", http.StatusSeeOther)
			return
		}
		http.Redirect(w, r, userPath(form["dimension"], form["id"], "cleared"), http.StatusSeeOther)
	case http.StatusNotFound:
		h.message(w, r, q, http.StatusNotFound, "No such override in force (cleared or lapsed meanwhile?)")
	case http.StatusBadRequest:
		h.message(w, r, q, http.StatusBadRequest, "Bad request: "+a.top)
	default:
		h.unexpected(w, r, q, "clearing the override", a)
	}
}
