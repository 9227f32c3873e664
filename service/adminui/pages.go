package adminui

import (
	"cmp"
	"errors"
	"net/http"
	"slices"
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
		// A caller warned on its way to a denial counts in both.
		if f.Throttles > 0 {
			c.throttled++
		}
		if f.Warnings > 0 {
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
	h.render(w, r, q, status, "rules", &view{Title: "Rules", Nav: "rules", Notice: h.deletedNotice(r), Error: bad, Data: map[string]any{
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
	if saved := r.URL.Query().Get("saved"); saved != "" {
		notice = h.savedNotice(saved, rl)
	}
	h.renderRule(w, r, q, http.StatusOK, rl, formOf(rl), nil, nil, notice, "")
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
	h.showUser(w, r, q, http.StatusOK, dim, id, &userWrite{Notice: userNotices[qs.Get("done")]})
}

// showUser answers status with the caller's page and uw, the state of its
// forms.
func (h *handler) showUser(w http.ResponseWriter, r *http.Request, q *req, status int, dim, id string, uw *userWrite) {
	data := map[string]any{"Dimension": dim, "ID": id, "Asked": false}
	v := &view{Title: "Users", Nav: "users", Data: data, Notice: uw.Notice, Error: uw.Top}
	if id == "" {
		h.render(w, r, q, status, "users", v)
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
	h.userForms(data, snap, dim, uw)
	h.render(w, r, q, status, "users", v)
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
	h.render(w, r, q, http.StatusOK, "overrides", &view{Title: "Overrides", Nav: "overrides", Notice: userNotices[r.URL.Query().Get("done")], Data: map[string]any{
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
