package adminapi

import (
	"errors"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/service/rulesdb"
)

// auditList is the answer of GET /audit.
type auditList struct {
	Entries    []auditEntry `json:"entries"`
	NextCursor string       `json:"next_cursor"`
}

// auditEntry is an audit row with what it changed, member by member
// (rulesdb's Changes; absent when before or after is not an object).
type auditEntry struct {
	rulesdb.AuditEntry
	Changes []rulesdb.FieldChange `json:"changes,omitempty"`
}

func (a *api) audit(w http.ResponseWriter, r *http.Request) *apiError {
	q, e := readQuery(r, "actor", "action", "target", "since", "until", "order", "cursor", "limit")
	if e != nil {
		return e
	}
	limit, e := q.limit()
	if e != nil {
		return e
	}
	f := rulesdb.AuditFilter{Actor: q.get("actor"), Action: q.get("action"), Target: q.get("target"), Cursor: q.get("cursor"), Limit: limit}
	var fe errs
	for _, p := range []struct {
		name string
		t    *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		if !q.has(p.name) {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, q.get(p.name))
		if err != nil {
			fe.add(p.name, "must be an RFC 3339 time (2026-11-24T12:00:00Z), got %q", clip(q.get(p.name)))
			continue
		}
		*p.t = t
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		fe.add("until", "must be after since")
	}
	switch q.get("order") {
	case "", "oldest":
	case "newest":
		f.Newest = true
	default:
		fe.add("order", "must be oldest or newest, got %q", clip(q.get("order")))
	}
	for _, p := range []string{"actor", "action", "target"} {
		if m := validText(q.get(p), 1024); m != "" {
			fe.add(p, "%s", m)
		}
	}
	if e := fe.err(); e != nil {
		return e
	}
	es, next, err := a.db.AuditQuery(r.Context(), f)
	if errors.Is(err, rulesdb.ErrCursor) {
		return bad("cursor", "not a cursor of this listing (use next_cursor as given, with the same order)")
	}
	if err != nil {
		return a.failed(r, "audit", err)
	}
	out := make([]auditEntry, len(es))
	for i, en := range es {
		out[i].AuditEntry = en
		out[i].Changes, _ = en.Changes()
	}
	if next != "" {
		w.Header().Set("Link", nextLink(r, next))
	}
	writeJSON(w, http.StatusOK, auditList{Entries: out, NextCursor: next})
	return nil
}
