package adminui

import (
	"errors"
	"net/http"
	"net/url"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// renderDelete shows the confirmation of a rule's deletion: the rule and
// the overrides of it in force, which go with it.
func (h *handler) renderDelete(w http.ResponseWriter, r *http.Request, q *req, status int, rl *rulesdb.Rule, top string) {
	now := h.now()
	var ovs []overrideRow
	for _, o := range h.eng.Snapshot().Overrides() {
		if o.RuleID == rl.ID && o.Until.After(now) {
			ovs = append(ovs, overrideRowOf(o, now))
		}
	}
	h.render(w, r, q, status, "ruledelete", &view{Title: "Delete rule " + rl.ID, Nav: "rules", Error: top, Data: map[string]any{
		"Rule": rl, "Overrides": capped(ovs), "More": max(0, len(ovs)-maxListed),
	}})
}

// confirmDelete asks to confirm the deletion of the path's rule.
func (h *handler) confirmDelete(w http.ResponseWriter, r *http.Request, q *req) {
	rl, ok := h.storedRule(w, r, q)
	if ok {
		h.renderDelete(w, r, q, http.StatusOK, rl, "")
	}
}

// deleteRule deletes the path's rule (and its overrides) through the admin
// API's DELETE, If-Match the version the confirmation showed: a rule
// changed since is not deleted.
func (h *handler) deleteRule(w http.ResponseWriter, r *http.Request, q *req) {
	if !q.canWrite() {
		h.message(w, r, q, http.StatusForbidden, "Forbidden: your token has the read scope; deleting needs the write scope")
		return
	}
	cur, ok := h.storedRule(w, r, q)
	if !ok {
		return
	}
	etag := r.PostFormValue("etag")
	if !strongETag.MatchString(etag) {
		h.renderDelete(w, r, q, http.StatusBadRequest, cur, "Not deleted: etag is missing from the form or not a version of the rule; confirm again below.")
		return
	}
	a := h.callAPI(r, http.MethodDelete, "/rules/"+url.PathEscape(cur.ID), etag, nil, nil)
	switch a.status {
	case http.StatusNoContent:
		if msg := h.syncedNow(r, "The deletion"); msg != "" {
			h.message(w, r, q, http.StatusServiceUnavailable, msg)
			return
		}
		http.Redirect(w, r, "/admin/?deleted="+url.QueryEscape(cur.ID), http.StatusSeeOther)
	case http.StatusPreconditionFailed:
		now, ok := h.storedRule(w, r, q)
		if ok {
			h.renderDelete(w, r, q, http.StatusConflict, now, "Not deleted: this rule was changed by someone else since you opened it (you confirmed version "+
				etag+", it is now version "+now.ETag+"). Review it below, and delete again if you still mean to.")
		}
	case http.StatusNotFound:
		h.message(w, r, q, http.StatusNotFound, "No such rule (deleted meanwhile?)")
	default:
		h.unexpected(w, r, q, "deleting the rule", a)
	}
}

// syncedNow is synced for a write whose answer names no revision: it
// waits for the database's revision after it.
func (h *handler) syncedNow(r *http.Request, what string) string {
	if h.sync == nil {
		return ""
	}
	rev, err := h.committed(r)
	if err != nil {
		h.log.ErrorContext(r.Context(), "adminui: reading the revision after a change", "change", what, "err", err)
		return what + " is stored, but this instance could not confirm it in force; reload the page shortly."
	}
	return h.synced(r, what, rev)
}

// deletedNotice is the rules page's notice after the rule of ?deleted=
// was deleted: said only while no such rule is stored.
func (h *handler) deletedNotice(r *http.Request) string {
	id := r.URL.Query().Get("deleted")
	if id == "" || core.ValidatePolicyName(id) != nil {
		return ""
	}
	if _, err := h.db.Get(r.Context(), id); !errors.Is(err, rulesdb.ErrNotFound) {
		return ""
	}
	return "Deleted rule " + id + " and any overrides of it."
}
