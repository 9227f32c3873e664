package adminui

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// maxFilter bounds a filter's text, in bytes.
const maxFilter = 1024

// finder is a search form of a listing as the page shows it: the values
// asked, the error of each refused one, and the link to the next page
// (the same filters, the next cursor).
type finder struct {
	Values  map[string]string
	Errors  map[string]string
	NextURL string
	// Filtered reports that any filter is set.
	Filtered bool
}

// newFinder reads fields from r's query. A value that holds a NUL or is
// longer than maxFilter is refused (its field named); textChecked has
// refused invalid UTF-8 already.
func newFinder(r *http.Request, fields ...string) *finder {
	qs := r.URL.Query()
	f := &finder{Values: map[string]string{}, Errors: map[string]string{}}
	for _, name := range fields {
		v := strings.TrimSpace(qs.Get(name))
		switch {
		case strings.IndexByte(v, 0) >= 0:
			f.Errors[name] = "must not contain a NUL byte"
			v = ""
		case len(v) > maxFilter:
			f.Errors[name] = "must be at most 1024 bytes"
			v = ""
		}
		f.Values[name] = v
		f.Filtered = f.Filtered || v != ""
	}
	return f
}

// bad returns the page's error line for the refused filters, in fields'
// order; "" when none was.
func (f *finder) bad(fields ...string) string {
	var msgs []string
	for _, name := range fields {
		if m := f.Errors[name]; m != "" {
			msgs = append(msgs, name+": "+m)
		}
	}
	if len(msgs) == 0 {
		return ""
	}
	return "Not searched: " + strings.Join(msgs, "; ") + "."
}

// next sets the link to the page after cursor at path, with the filters
// of fields that are set.
func (f *finder) next(path, cursor string, fields ...string) {
	if cursor == "" {
		return
	}
	q := url.Values{}
	for _, name := range fields {
		if v := f.Values[name]; v != "" {
			q.Set(name, v)
		}
	}
	q.Set("cursor", cursor)
	f.NextURL = path + "?" + q.Encode()
}

// ruleFields are the rules page's filters.
var ruleFields = []string{"id", "name", "dimension", "endpoint", "tier", "algorithm", "enabled"}

// findRules reads the rules page's filters and lists a page of the rules
// they select (after the query's cursor). A refused filter or cursor is
// the finder's error (bad), with no rules listed.
func (h *handler) findRules(r *http.Request) (*finder, []*rulesdb.Rule, string, error) {
	f := newFinder(r, ruleFields...)
	v := f.Values
	if a := v["algorithm"]; a != "" {
		if _, err := core.ParseAlgorithm(a); err != nil {
			f.Errors["algorithm"] = "must be one of " + strings.Join(core.AlgorithmNames(), ", ")
		}
	}
	rf := rulesdb.RuleFilter{ID: v["id"], Name: v["name"], Dimension: v["dimension"], Endpoint: v["endpoint"], Tier: v["tier"], Algorithm: v["algorithm"]}
	switch v["enabled"] {
	case "":
	case "yes", "no":
		on := v["enabled"] == "yes"
		rf.Enabled = &on
	default:
		f.Errors["enabled"] = "must be yes or no"
	}
	if len(f.Errors) > 0 {
		return f, nil, "", nil
	}
	list, next, err := h.db.ListRules(r.Context(), rf, r.URL.Query().Get("cursor"), rulesPerPage)
	if errors.Is(err, rulesdb.ErrCursor) {
		f.Errors["cursor"] = "not from this listing; start again from the first page"
		return f, nil, "", nil
	}
	if err != nil {
		return f, nil, "", err
	}
	f.next("/admin/", next, ruleFields...)
	return f, list, next, nil
}

// callerFields are the callers page's filters.
var callerFields = []string{"dimension", "identifier"}

// callersPerPage is how many callers the callers page lists at once.
const callersPerPage = 100

// callers lists the callers the database holds a tier or an override in
// force for, by dimension and identifier prefix, each linked to its
// limits.
func (h *handler) callers(w http.ResponseWriter, r *http.Request, q *req) {
	f := newFinder(r, callerFields...)
	v := &view{Title: "Callers", Nav: "callers", Data: map[string]any{"Find": f}}
	if v.Error = f.bad(callerFields...); v.Error != "" {
		h.render(w, r, q, http.StatusBadRequest, "callers", v)
		return
	}
	cf := rulesdb.CallerFilter{Dimension: f.Values["dimension"], Identifier: f.Values["identifier"]}
	list, next, err := h.db.ListCallers(r.Context(), cf, r.URL.Query().Get("cursor"), callersPerPage)
	if errors.Is(err, rulesdb.ErrCursor) {
		v.Error = "cursor: not from this listing; start again from the first page."
		h.render(w, r, q, http.StatusBadRequest, "callers", v)
		return
	}
	if err != nil {
		h.failed(w, r, q, "listing the callers", err)
		return
	}
	f.next("/admin/callers", next, callerFields...)
	v.Data.(map[string]any)["Callers"] = list
	h.render(w, r, q, http.StatusOK, "callers", v)
}

// timeLayouts are the forms a time filter takes, in UTC unless it says
// otherwise (RFC 3339).
var timeLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04", "2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02"}

// parseWhen reads a time filter; ok is false when it is none of
// timeLayouts.
func parseWhen(s string) (time.Time, bool) {
	for _, l := range timeLayouts {
		if t, err := time.ParseInLocation(l, s, time.UTC); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}
