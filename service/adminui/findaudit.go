package adminui

import (
	"errors"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/service/rulesdb"
)

// auditPage is how many audit entries a page shows.
const auditPage = 100

// auditFields are the audit page's filters.
var auditFields = []string{"actor", "action", "target", "since", "until"}

// auditActions are the actions the audit's action filter offers (any
// other is searched as typed).
var auditActions = []string{"rule.", "rule.create", "rule.update", "rule.delete", "tier.", "tier.set", "tier.clear",
	"override.", "override.set", "override.clear", "token.", "token.create", "token.revoke",
	rulesdb.ActionLimitReset, "store.", rulesdb.ActionStoreReset, rulesdb.ActionStoreOverrideSet, rulesdb.ActionStoreOverrideClear}

// auditFilter reads the audit page's filters into f's finder and the
// store's filter; the finder's errors name the refused ones.
func auditFilter(r *http.Request) (*finder, rulesdb.AuditFilter) {
	f := newFinder(r, auditFields...)
	v := f.Values
	af := rulesdb.AuditFilter{Actor: v["actor"], Action: v["action"], Target: v["target"], Newest: true,
		Cursor: r.URL.Query().Get("cursor"), Limit: auditPage}
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"since", &af.Since}, {"until", &af.Until}} {
		if s := v[p.name]; s != "" {
			t, ok := parseWhen(s)
			if !ok {
				f.Errors[p.name] = "must be a time in UTC (2026-12-02 06:30, 2026-12-02) or RFC 3339"
				continue
			}
			*p.dst = t
		}
	}
	if !af.Since.IsZero() && !af.Until.IsZero() && !af.Until.After(af.Since) && f.Errors["until"] == "" {
		f.Errors["until"] = "must be after since"
	}
	return f, af
}

// audit shows the audit trail, newest first, filtered by actor, action,
// target and time, each entry's changes field by field.
func (h *handler) audit(w http.ResponseWriter, r *http.Request, q *req) {
	f, af := auditFilter(r)
	data := map[string]any{"Find": f, "Actions": auditActions}
	v := &view{Title: "Audit", Nav: "audit", Data: data}
	if v.Error = f.bad(auditFields...); v.Error != "" {
		h.render(w, r, q, http.StatusBadRequest, "audit", v)
		return
	}
	entries, next, err := h.db.AuditQuery(r.Context(), af)
	if errors.Is(err, rulesdb.ErrCursor) {
		v.Error = "cursor: not from this listing; start again from the first page."
		h.render(w, r, q, http.StatusBadRequest, "audit", v)
		return
	}
	if err != nil {
		h.failed(w, r, q, "reading the audit trail", err)
		return
	}
	rows := make([]diffView, len(entries))
	for i, e := range entries {
		rows[i] = diffOf(e)
	}
	f.next("/admin/audit", next, auditFields...)
	data["Entries"] = rows
	h.render(w, r, q, http.StatusOK, "audit", v)
}
