package adminui

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// formFields are the rule form's fields, each named as the admin API's
// rule member it is, in the form's order.
var formFields = []string{"name", "dimension", "endpoint_pattern", "tier", "limit", "window_seconds", "algorithm", "burst", "lease_seconds", "shadow", "enabled"}

// newFields are the new-rule form's fields: the rule's id, then formFields.
var newFields = append([]string{"id"}, formFields...)

// checkboxes are the form's fields a browser leaves out when unchecked.
var checkboxes = []string{"shadow", "enabled"}

// strongETag is a rule's version as its forms carry it (the API's strong
// entity-tag of the revision): a form with anything else ("*" would match
// every version) is refused.
var strongETag = regexp.MustCompile(`^"[0-9]{1,19}"$`)

// conflict describes an edit refused because the rule changed meanwhile.
type conflict struct {
	Yours, Now string
	Changes    []change
}

type change struct{ Field, Value string }

// formOf returns the form values of a stored rule.
func formOf(rl *rulesdb.Rule) map[string]string {
	on := func(b bool) string {
		if b {
			return "on"
		}
		return ""
	}
	return map[string]string{
		"id": rl.ID, "name": rl.Name, "dimension": rl.Dimension, "endpoint_pattern": rl.EndpointPattern, "tier": rl.Tier,
		"limit": strconv.FormatInt(rl.Limit, 10), "window_seconds": strconv.FormatInt(rl.WindowSeconds, 10),
		"algorithm": rl.Algorithm, "burst": strconv.FormatInt(rl.Burst, 10),
		"lease_seconds": strconv.FormatFloat(rl.LeaseSeconds, 'f', -1, 64), "shadow": on(rl.Shadow), "enabled": on(rl.Enabled),
	}
}

// ruleJSON is the admin API's JSON body of a rule form (with the id when
// withID: a new rule's; an edit's is its path's). A required member left
// empty is left out, for the API to name; errs names each numeric field
// that is not a number, which the API's JSON cannot carry.
func ruleJSON(form map[string]string, withID bool) (body map[string]any, errs map[string]string) {
	body = map[string]any{"name": form["name"], "endpoint_pattern": form["endpoint_pattern"], "tier": form["tier"],
		"shadow": form["shadow"] == "on", "enabled": form["enabled"] == "on"}
	errs = map[string]string{}
	required := []string{"dimension", "algorithm"}
	if withID {
		required = append(required, "id")
	}
	for _, f := range required {
		if form[f] != "" {
			body[f] = form[f]
		}
	}
	for _, f := range []string{"limit", "window_seconds", "burst"} {
		wholeNumber(body, errs, form, f)
	}
	if v := form["lease_seconds"]; v != "" {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			errs["lease_seconds"] = "must be a number of seconds (0.5, 2; 0 for none)"
		} else {
			body["lease_seconds"] = x
		}
	}
	return body, errs
}

// savedNotice is what the rule page says after the rule was saved
// (saved=1) or created (saved=created).
func (h *handler) savedNotice(saved string, rl *rulesdb.Rule) string {
	what := "Saved"
	if saved == "created" {
		what = "Created"
	}
	if h.sync != nil {
		return what + ": version " + rl.ETag + " is in force on this instance, and on every instance within a second."
	}
	return what + ": version " + rl.ETag + " is stored and goes into force on every instance within a second."
}

// editForm is the form of an edit of cur: each field the request sent
// (a checkbox left out is unchecked), the stored value of the others.
func editForm(r *http.Request, cur *rulesdb.Rule) map[string]string {
	form := formOf(cur)
	for _, f := range formFields {
		if _, ok := r.PostForm[f]; ok || slices.Contains(checkboxes, f) {
			form[f] = strings.TrimSpace(r.PostFormValue(f))
		}
	}
	return form
}

// saveRule replaces a rule with its edited form through the admin API's
// PUT, If-Match the version the form was rendered from: an edit made on a
// stale page is refused, never applied over another change.
func (h *handler) saveRule(w http.ResponseWriter, r *http.Request, q *req) {
	if !q.canWrite() {
		h.message(w, r, q, http.StatusForbidden, "Forbidden: your token has the read scope; saving needs the write scope")
		return
	}
	cur, ok := h.storedRule(w, r, q)
	if !ok {
		return
	}
	form := editForm(r, cur)
	etag := r.PostFormValue("etag")
	shown := *cur
	shown.ETag = etag // the form keeps the version it edits
	if !strongETag.MatchString(etag) {
		h.renderRule(w, r, q, http.StatusBadRequest, &shown, form, nil, nil, "", "etag: missing from the form or not a version of the rule; reload the page.")
		return
	}
	body, errs := ruleJSON(form, false)
	if len(errs) > 0 {
		h.renderRule(w, r, q, http.StatusBadRequest, &shown, form, errs, nil, "", "Not saved: correct the fields marked below.")
		return
	}
	a := h.callAPI(r, http.MethodPut, "/rules/"+url.PathEscape(cur.ID), etag, body, formFields)
	switch a.status {
	case http.StatusOK:
		var saved rulesdb.Rule
		if err := a.decode(&saved); err != nil {
			h.failed(w, r, q, "saving the rule", err)
			return
		}
		if h.inForce(w, r, q, &saved) {
			http.Redirect(w, r, "/admin/rules/"+url.PathEscape(saved.ID)+"?saved=1", http.StatusSeeOther)
		}
	case http.StatusPreconditionFailed:
		h.conflicted(w, r, q, cur.ID, etag, form)
	case http.StatusNotFound:
		h.message(w, r, q, http.StatusNotFound, "No such rule (deleted meanwhile?)")
	case http.StatusBadRequest, http.StatusConflict:
		h.renderRule(w, r, q, http.StatusBadRequest, &shown, form, a.fields, nil, "", notSaved(a.top))
	default:
		h.unexpected(w, r, q, "saving the rule", a)
	}
}

// notSaved is the page's message of a refused form: what names no field
// of it, or a pointer to the fields marked.
func notSaved(top string) string {
	if top == "" {
		return "Not saved: correct the fields marked below."
	}
	return "Not saved: " + top + "."
}

// storedRule reads the rule of the path's id, or answers (404, 503) and
// reports false.
func (h *handler) storedRule(w http.ResponseWriter, r *http.Request, q *req) (*rulesdb.Rule, bool) {
	cur, err := h.db.Get(r.Context(), r.PathValue("id"))
	if errors.Is(err, rulesdb.ErrNotFound) {
		h.message(w, r, q, http.StatusNotFound, "No such rule (deleted meanwhile?)")
		return nil, false
	}
	if err != nil {
		h.failed(w, r, q, "reading the rule", err)
		return nil, false
	}
	return cur, true
}

// conflicted answers a save of the rule id from the form of version etag
// that another write overtook: 409, the rule as it is now, and the
// changes of form against it, to apply again.
func (h *handler) conflicted(w http.ResponseWriter, r *http.Request, q *req, id, etag string, form map[string]string) {
	now, err := h.db.Get(r.Context(), id)
	if err != nil {
		h.failed(w, r, q, "reading the rule", err)
		return
	}
	c := &conflict{Yours: etag, Now: now.ETag}
	nowForm := formOf(now)
	for _, f := range formFields {
		if form[f] != nowForm[f] {
			c.Changes = append(c.Changes, change{Field: f, Value: form[f]})
		}
	}
	h.renderRule(w, r, q, http.StatusConflict, now, nowForm, nil, c, "", "")
}

// inForce waits until the saved rule's revision is in force on this
// instance (Options.Sync) and reports true; otherwise it answers 503 with
// the rule as saved and why it is not in force, and reports false.
func (h *handler) inForce(w http.ResponseWriter, r *http.Request, q *req, saved *rulesdb.Rule) bool {
	if h.sync == nil {
		return true
	}
	err := h.sync.Sync(r.Context(), saved.Revision)
	if err == nil {
		return true
	}
	var nf *rulesdb.NotInForceError
	msg := "Saved as version " + saved.ETag + ", but this instance could not confirm it in force; reload the page shortly."
	if errors.As(err, &nf) {
		msg = fmt.Sprintf("Saved as version %s, but not in force on this instance in time: version \"%d\" is. It takes effect when the instance loads it; reload the page shortly.", saved.ETag, nf.InForce)
		if nf.Refused {
			msg = fmt.Sprintf("Saved as version %s, but this instance refused to put the rules in force (version \"%d\" stays; the cause is logged): correct the rules with another change.", saved.ETag, nf.InForce)
		}
	}
	h.log.ErrorContext(r.Context(), "adminui: a saved rule is not in force on this instance", "rule", saved.ID, "revision", saved.Revision, "err", err)
	h.renderRule(w, r, q, http.StatusServiceUnavailable, saved, formOf(saved), nil, nil, "", msg)
	return false
}

// newRuleDefaults are the values a new rule's form starts from.
var newRuleDefaults = map[string]string{"dimension": "user", "algorithm": "token_bucket", "window_seconds": "60", "burst": "0", "lease_seconds": "0", "enabled": "on"}

func (h *handler) renderNew(w http.ResponseWriter, r *http.Request, q *req, status int, form, errs map[string]string, top string) {
	if errs == nil {
		errs = map[string]string{}
	}
	h.render(w, r, q, status, "rulenew", &view{Title: "New rule", Nav: "rules", Error: top, Data: map[string]any{
		"Form": form, "Errors": errs, "Algorithms": core.AlgorithmNames(),
	}})
}

// newRule shows the form of a new rule (read-only for a read-scope token).
func (h *handler) newRule(w http.ResponseWriter, r *http.Request, q *req) {
	h.renderNew(w, r, q, http.StatusOK, newRuleDefaults, nil, "")
}

// createRule creates the rule of the new-rule form through the admin
// API's POST /rules.
func (h *handler) createRule(w http.ResponseWriter, r *http.Request, q *req) {
	if !q.canWrite() {
		h.message(w, r, q, http.StatusForbidden, "Forbidden: your token has the read scope; creating a rule needs the write scope")
		return
	}
	form := formValues(r, newFields...)
	body, errs := ruleJSON(form, true)
	if len(errs) > 0 {
		h.renderNew(w, r, q, http.StatusBadRequest, form, errs, "Not created: correct the fields marked below.")
		return
	}
	a := h.callAPI(r, http.MethodPost, "/rules", "", body, newFields)
	switch a.status {
	case http.StatusCreated:
		var saved rulesdb.Rule
		if err := a.decode(&saved); err != nil {
			h.failed(w, r, q, "creating the rule", err)
			return
		}
		if h.inForce(w, r, q, &saved) {
			http.Redirect(w, r, "/admin/rules/"+url.PathEscape(saved.ID)+"?saved=created", http.StatusSeeOther)
		}
	case http.StatusBadRequest, http.StatusConflict:
		top := "Not created: correct the fields marked below."
		if a.top != "" {
			top = "Not created: " + a.top + "."
		}
		h.renderNew(w, r, q, http.StatusBadRequest, form, a.fields, top)
	default:
		h.unexpected(w, r, q, "creating the rule", a)
	}
}
