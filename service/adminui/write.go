package adminui

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/service/adminapi"
	"github.com/sluicehq/sluice/service/internal/problem"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// The page's forms change nothing themselves: each is sent, as the JSON
// request the admin API documents, to the admin API's own handler
// (adminapi.NewAuthenticated) under the session's principal and the page
// request's id. A form is thus checked by the API's validation, written by
// its write path and audited as its requests are; the API's refusals
// (problem details naming the fields at fault) are shown next to the form's
// fields of the same names.

// apiReply is the admin API's answer to one form.
type apiReply struct {
	status int
	header http.Header
	body   []byte
	// fields maps a field at fault (the API's member name) to its
	// messages; top is the refusal of what names no field of the form.
	fields map[string]string
	top    string
}

// apiWriter keeps the admin API's answer in memory.
type apiWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (a *apiWriter) Header() http.Header { return a.header }

func (a *apiWriter) WriteHeader(code int) {
	if a.status == 0 {
		a.status = code
	}
}

func (a *apiWriter) Write(b []byte) (int, error) {
	a.WriteHeader(http.StatusOK)
	return a.body.Write(b)
}

// callAPI sends method path (under adminapi.Prefix; path's segments
// escaped by the caller) with body as JSON (nil: none) and ifMatch (""
// for none) to the admin API, in r's context: its principal is the actor,
// its request id the audit rows'. A refusal's fields are those of the
// form's names known; the others are joined in top.
func (h *handler) callAPI(r *http.Request, method, path, ifMatch string, body any, known []string) apiReply {
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return apiReply{status: http.StatusInternalServerError, top: "the form could not be encoded"}
		}
	}
	ar, err := http.NewRequestWithContext(r.Context(), method, adminapi.Prefix+path, bytes.NewReader(b))
	if err != nil {
		return apiReply{status: http.StatusBadRequest, top: "the request could not be made"}
	}
	if body != nil {
		ar.Header.Set("Content-Type", "application/json")
	}
	if ifMatch != "" {
		ar.Header.Set("If-Match", ifMatch)
	}
	ar.RemoteAddr, ar.Host = r.RemoteAddr, r.Host
	w := &apiWriter{header: http.Header{}}
	h.api.ServeHTTP(w, ar)
	reply := apiReply{status: w.status, header: w.header, body: w.body.Bytes(), fields: map[string]string{}}
	if reply.status >= 400 {
		reply.refusal(known)
	}
	return reply
}

// refusal reads the problem details of a refused request into fields and
// top.
func (a *apiReply) refusal(known []string) {
	var p problem.Details
	if json.Unmarshal(a.body, &p) != nil {
		a.top = http.StatusText(a.status)
		return
	}
	var top []string
	for _, fe := range p.Errors {
		if !slices.Contains(known, fe.Field) {
			top = append(top, fe.Field+": "+fe.Message)
			continue
		}
		if a.fields[fe.Field] != "" {
			a.fields[fe.Field] += "; "
		}
		a.fields[fe.Field] += fe.Message
	}
	if len(p.Errors) == 0 && p.Detail != "" {
		top = append(top, p.Detail)
	}
	a.top = strings.Join(top, "; ")
}

// decode reads the API's JSON answer into v.
func (a *apiReply) decode(v any) error {
	if err := json.Unmarshal(a.body, v); err != nil {
		return fmt.Errorf("adminui: the admin API's answer: %w", err)
	}
	return nil
}

// unexpected answers an API answer the form has no page for: a database
// failure (503, logged by the API) or anything else, logged here; never its
// text.
func (h *handler) unexpected(w http.ResponseWriter, r *http.Request, q *req, what string, a apiReply) {
	if a.status != http.StatusServiceUnavailable {
		h.log.ErrorContext(r.Context(), "adminui: the admin API answered "+what+" unexpectedly", "status", a.status, "detail", a.top)
	}
	h.message(w, r, q, http.StatusServiceUnavailable, "Service unavailable: "+what+" failed; try again shortly")
}

// synced waits until revision (the one a write committed, or a later one)
// is in force on this instance (Options.Sync), and returns "" when it is;
// else what the page says: the change is stored, and why it is not in force
// here (logged).
func (h *handler) synced(r *http.Request, what string, revision int64) string {
	if h.sync == nil {
		return ""
	}
	err := h.sync.Sync(r.Context(), revision)
	if err == nil {
		return ""
	}
	h.log.ErrorContext(r.Context(), "adminui: a change is not in force on this instance", "change", what, "revision", revision, "err", err)
	var nf *rulesdb.NotInForceError
	switch {
	case errors.As(err, &nf) && nf.Refused:
		return fmt.Sprintf("%s is stored (revision %d), but this instance refused to put the rules in force (version \"%d\" stays; the cause is logged): correct the rules with another change.", what, revision, nf.InForce)
	case errors.As(err, &nf):
		return fmt.Sprintf("%s is stored (revision %d), but not in force on this instance in time: version \"%d\" is. It takes effect when the instance loads it; reload the page shortly.", what, revision, nf.InForce)
	}
	return fmt.Sprintf("%s is stored (revision %d), but this instance could not confirm it in force; reload the page shortly.", what, revision)
}

// committed returns the revision of the database after a write that
// answered no revision of its own (a delete, a tier): the write's, or a
// later one, which Sync may wait for alike.
func (h *handler) committed(r *http.Request) (int64, error) {
	return h.db.Revision(r.Context())
}

// formValues returns the trimmed values of fields in r's form.
func formValues(r *http.Request, fields ...string) map[string]string {
	form := make(map[string]string, len(fields))
	for _, f := range fields {
		form[f] = strings.TrimSpace(r.PostFormValue(f))
	}
	return form
}

// notNumber is the message of a form's field that is not a number.
const notNumber = "must be a whole number"

// wholeNumber puts form[field] into body as a JSON number; "" leaves it
// out (the API says when it is required), and a value that is not a whole
// number is added to errs.
func wholeNumber(body map[string]any, errs map[string]string, form map[string]string, field string) {
	v := form[field]
	if v == "" {
		return
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		errs[field] = notNumber
		return
	}
	body[field] = n
}

// writeTable lists the routes of the page's forms beside the rule edit
// (table serves them with the others).
func (h *handler) writeTable() []page {
	return []page{
		{pattern: "GET /admin/new-rule", serve: h.authed(h.newRule)},
		{pattern: "POST /admin/new-rule", serve: h.authed(h.createRule), form: append(slices.Clone(newFields), "csrf")},
		{pattern: "GET /admin/rules/{id}/delete", serve: h.authed(h.confirmDelete)},
		{pattern: "POST /admin/rules/{id}/delete", serve: h.authed(h.deleteRule), form: []string{"etag", "csrf"}},
		{pattern: "POST /admin/users/tier", serve: h.authed(h.setTier), form: append(slices.Clone(tierFields), "csrf")},
		{pattern: "POST /admin/users/override", serve: h.authed(h.setOverride), form: append(slices.Clone(overrideFields), "csrf")},
		{pattern: "POST /admin/users/override/clear", serve: h.authed(h.clearOverride), form: append(slices.Clone(clearFields), "csrf")},
	}
}
