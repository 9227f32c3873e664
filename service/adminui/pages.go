package adminui

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rules"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// maxListed bounds the rows of the overrides and recent pages (the rest
// are counted, not shown).
const maxListed = 1000

func capped[T any](s []T) []T { return s[:min(len(s), maxListed)] }

// rulesPerPage is the number of rules the rules page lists at once.
const rulesPerPage = 200

// ruleRow is a rule with its live usage: the distinct callers it warned and
// throttled recently.
type ruleRow struct {
	*rulesdb.Rule
	Warned, Throttled int
}

// rules lists the stored rules with their recent warnings and throttles.
func (h *handler) rules(w http.ResponseWriter, r *http.Request, q *req) {
	find, list, next, err := h.findRules(r)
	if err != nil {
		h.failed(w, r, q, "listing the rules", err)
		return
	}
	type count struct{ warned, throttled int }
	counts := map[string]*count{}
	for _, f := range h.flagged() {
		c := counts[f.Rule]
		if c == nil {
			c = &count{}
			counts[f.Rule] = c
		}
		switch f.State {
		case core.Throttled:
			c.throttled++
		case core.Warning:
			c.warned++
		}
	}
	rows := make([]ruleRow, len(list))
	for i, rl := range list {
		rows[i].Rule = rl
		if c := counts[rl.ID]; c != nil {
			rows[i].Warned, rows[i].Throttled = c.warned, c.throttled
		}
	}
	status, bad := http.StatusOK, find.bad(append(ruleFields, "cursor")...)
	if bad != "" {
		status = http.StatusBadRequest
	}
	h.render(w, r, q, status, "rules", &view{Title: "Rules", Nav: "rules", Error: bad, Data: map[string]any{
		"Rules": rows, "Next": next, "Revision": h.eng.Snapshot().Revision(), "Find": find, "Algorithms": core.AlgorithmNames(),
	}})
}

// flagged returns the recently warned and throttled callers (none without
// a Recent).
func (h *handler) flagged() []engine.Flagged {
	if h.recent == nil {
		return nil
	}
	return h.recent.List(h.now())
}

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
		"name": rl.Name, "endpoint_pattern": rl.EndpointPattern, "tier": rl.Tier,
		"limit": strconv.FormatInt(rl.Limit, 10), "window_seconds": strconv.FormatInt(rl.WindowSeconds, 10),
		"algorithm": rl.Algorithm, "burst": strconv.FormatInt(rl.Burst, 10),
		"shadow": on(rl.Shadow), "enabled": on(rl.Enabled),
	}
}

// formFields are the editable fields, in the form's order.
var formFields = []string{"name", "endpoint_pattern", "tier", "limit", "window_seconds", "algorithm", "burst", "shadow", "enabled"}

func (h *handler) renderRule(w http.ResponseWriter, r *http.Request, q *req, status int, rl *rulesdb.Rule, form, errs map[string]string, c *conflict, notice, top string) {
	if errs == nil {
		errs = map[string]string{}
	}
	h.render(w, r, q, status, "rule", &view{Title: "Rule " + rl.ID, Nav: "rules", Notice: notice, Error: top, Data: map[string]any{
		"Rule": rl, "Form": form, "Errors": errs, "Algorithms": core.AlgorithmNames(), "Conflict": c,
	}})
}

// rule shows a rule's form (read-only for a read-scope token).
func (h *handler) rule(w http.ResponseWriter, r *http.Request, q *req) {
	rl, err := h.db.Get(r.Context(), r.PathValue("id"))
	if errors.Is(err, rulesdb.ErrNotFound) {
		h.message(w, r, q, http.StatusNotFound, "No such rule")
		return
	}
	if err != nil {
		h.failed(w, r, q, "reading the rule", err)
		return
	}
	notice := ""
	if r.URL.Query().Get("saved") != "" {
		notice = "Saved: version " + rl.ETag + " is stored and goes into force on every instance within a second."
		if h.sync != nil {
			notice = "Saved: version " + rl.ETag + " is in force on this instance, and on every instance within a second."
		}
	}
	h.renderRule(w, r, q, http.StatusOK, rl, formOf(rl), nil, nil, notice, "")
}

// saveRule stores a rule's edited fields, provided the rule is still at the
// version the form was rendered from.
func (h *handler) saveRule(w http.ResponseWriter, r *http.Request, q *req) {
	if !q.canWrite() {
		h.message(w, r, q, http.StatusForbidden, "Forbidden: your token has the read scope; saving needs the write scope")
		return
	}
	ctx := r.Context()
	cur, err := h.db.Get(ctx, r.PathValue("id"))
	if errors.Is(err, rulesdb.ErrNotFound) {
		h.message(w, r, q, http.StatusNotFound, "No such rule (deleted meanwhile?)")
		return
	}
	if err != nil {
		h.failed(w, r, q, "reading the rule", err)
		return
	}
	form := map[string]string{}
	for _, f := range formFields {
		form[f] = strings.TrimSpace(r.PostFormValue(f))
	}
	etag := r.PostFormValue("etag")
	next, errs := ruleOf(cur, form)
	shown := *cur
	shown.ETag = etag // the form keeps the version it edits
	if etag == "" {
		h.renderRule(w, r, q, http.StatusBadRequest, &shown, form, errs, nil, "", "etag: missing from the form; reload the page.")
		return
	}
	if len(errs) > 0 {
		h.renderRule(w, r, q, http.StatusBadRequest, &shown, form, errs, nil, "", "Not saved: correct the fields marked below.")
		return
	}
	saved, err := h.db.Update(ctx, q.who.Name, next, etag)
	switch {
	case err == nil:
		if !h.inForce(w, r, q, saved) {
			return
		}
		http.Redirect(w, r, "/admin/rules/"+url.PathEscape(saved.ID)+"?saved=1", http.StatusSeeOther)
	case errors.Is(err, rulesdb.ErrStale):
		h.conflicted(w, r, q, cur.ID, etag, form)
	case errors.Is(err, rulesdb.ErrNotFound):
		h.message(w, r, q, http.StatusNotFound, "No such rule (deleted meanwhile?)")
	case errors.Is(err, rulesdb.ErrInvalid):
		errs, top := fieldErrors(err)
		if top == "" {
			top = "Not saved: correct the fields marked below."
		}
		h.renderRule(w, r, q, http.StatusBadRequest, &shown, form, errs, nil, "", top)
	default:
		h.failed(w, r, q, "saving the rule", err)
	}
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

// ruleOf applies the form to cur; errs names each field that is not
// well-formed.
func ruleOf(cur *rulesdb.Rule, form map[string]string) (rulesdb.Rule, map[string]string) {
	next := *cur
	errs := map[string]string{}
	num := func(field string, dst *int64) {
		v, err := strconv.ParseInt(form[field], 10, 64)
		if err != nil {
			errs[field] = "must be a whole number"
			return
		}
		*dst = v
	}
	next.Name, next.EndpointPattern, next.Tier = form["name"], form["endpoint_pattern"], form["tier"]
	num("limit", &next.Limit)
	num("window_seconds", &next.WindowSeconds)
	if form["burst"] == "" {
		next.Burst = 0
	} else {
		num("burst", &next.Burst)
	}
	next.Algorithm = form["algorithm"]
	if _, err := core.ParseAlgorithm(next.Algorithm); err != nil {
		errs["algorithm"] = "must be one of " + strings.Join(core.AlgorithmNames(), ", ")
	}
	next.Shadow, next.Enabled = form["shadow"] == "on", form["enabled"] == "on"
	return next, errs
}

// fieldErrors maps the refusals of the store (joined ones each) to the
// form's fields by the field each *core.FieldError names (a Rule's JSON
// member, which the form's fields are); what names no field of the form is
// returned as top.
func fieldErrors(err error) (map[string]string, string) {
	errs := map[string]string{}
	var top []string
	list := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		list = j.Unwrap()
	}
	for _, e := range list {
		var fe *core.FieldError
		switch {
		case !errors.As(e, &fe):
			top = append(top, "the rule was refused")
		case !slices.Contains(formFields, fe.Field):
			top = append(top, fe.Error())
		default:
			if errs[fe.Field] != "" {
				errs[fe.Field] += "; "
			}
			errs[fe.Field] += fe.Message
		}
	}
	return errs, strings.Join(top, "; ")
}

// usageRow is one rule of a caller's effective limits.
type usageRow struct {
	Rule, Endpoint, Limit, From, Reset, State string
	Used, Remaining, Capacity                 int64
}

// overrideRow is an override in force.
type overrideRow struct {
	Rule, Dimension, Identifier, Limit, Until, In string
	until                                         time.Time
}

func overrideRowOf(o rules.Override, now time.Time) overrideRow {
	lim := "blocked"
	if o.Limit != (core.Limit{}) {
		lim = o.Limit.String()
	}
	return overrideRow{Rule: o.RuleID, Dimension: o.Dimension, Identifier: o.Identifier, Limit: lim,
		Until: fmtTime(o.Until), In: o.Until.Sub(now).Round(time.Second).String(), until: o.Until}
}

// users shows a caller's effective limits, tier and overrides.
func (h *handler) users(w http.ResponseWriter, r *http.Request, q *req) {
	qs := r.URL.Query()
	dim, id := qs.Get("dimension"), qs.Get("id")
	if dim == "" {
		dim = "user"
	}
	data := map[string]any{"Dimension": dim, "ID": id, "Asked": false}
	v := &view{Title: "Users", Nav: "users", Data: data}
	if id == "" {
		h.render(w, r, q, http.StatusOK, "users", v)
		return
	}
	usage, err := h.eng.Usage(r.Context(), dim, id)
	var fe *core.FieldError
	if errors.Is(err, engine.ErrInvalid) && errors.As(err, &fe) {
		v.Error = fe.Error()
		h.render(w, r, q, http.StatusBadRequest, "users", v)
		return
	}
	if err != nil {
		h.failed(w, r, q, "reading the usage", err)
		return
	}
	now := h.now()
	snap := h.eng.Snapshot()
	data["Asked"], data["Tier"] = true, snap.TierOf(dim, id)
	rows := make([]usageRow, 0, len(usage))
	for _, u := range usage {
		row := usageRow{Rule: u.Rule.ID, Endpoint: strings.Join(u.Rule.Endpoints, ", "), Limit: u.Limit.String(),
			Used: u.Used, Remaining: u.Remaining, Capacity: u.Capacity, Reset: fmtTime(u.ResetAt), State: u.State.String(), From: "rule"}
		if row.Endpoint == "" {
			row.Endpoint = "every endpoint"
		}
		switch {
		case u.Override != nil:
			row.From = "override until " + fmtTime(u.Override.Until)
		case u.Tier != "" && u.Rule.Tiers[u.Tier] != (core.Limit{}):
			row.From = "tier " + u.Tier
		}
		if u.Blocked {
			row.Limit = "blocked"
		}
		rows = append(rows, row)
	}
	data["Usage"] = rows
	var ovs []overrideRow
	for _, o := range snap.Overrides() {
		if o.Dimension == dim && o.Identifier == id && o.Until.After(now) {
			ovs = append(ovs, overrideRowOf(o, now))
		}
	}
	data["Overrides"] = ovs
	h.render(w, r, q, http.StatusOK, "users", v)
}

// overrides lists the overrides in force, the soonest to lapse first.
func (h *handler) overrides(w http.ResponseWriter, r *http.Request, q *req) {
	now := h.now()
	snap := h.eng.Snapshot()
	var rows []overrideRow
	for _, o := range snap.Overrides() {
		if o.Until.After(now) {
			rows = append(rows, overrideRowOf(o, now))
		}
	}
	slices.SortStableFunc(rows, func(a, b overrideRow) int { return a.until.Compare(b.until) })
	h.render(w, r, q, http.StatusOK, "overrides", &view{Title: "Overrides", Nav: "overrides", Data: map[string]any{
		"Overrides": capped(rows), "More": max(0, len(rows)-maxListed), "Revision": snap.Revision(),
	}})
}

// recentPage lists the callers warned or throttled recently.
func (h *handler) recentPage(w http.ResponseWriter, r *http.Request, q *req) {
	rule := r.URL.Query().Get("rule")
	var list []engine.Flagged
	for _, f := range h.flagged() {
		if rule == "" || f.Rule == rule {
			list = append(list, f)
		}
	}
	slices.SortStableFunc(list, func(a, b engine.Flagged) int { return cmp.Compare(b.Last.UnixNano(), a.Last.UnixNano()) })
	h.render(w, r, q, http.StatusOK, "recent", &view{Title: "Recent", Nav: "recent", Data: map[string]any{
		"Flagged": capped(list), "More": max(0, len(list)-maxListed), "Rule": rule, "Enabled": h.recent != nil,
	}})
}
