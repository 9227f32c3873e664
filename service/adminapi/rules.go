package adminapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// Bounds on a rule's strings, in bytes.
const (
	// MaxName bounds a rule's free-text name.
	MaxName = 256
	// MaxTier bounds a tier's name.
	MaxTier = 64
	// maxWindow is the longest window, as the rules file allows.
	maxWindow = 100 * 365 * 24 * 60 * 60
)

// ruleBody is a rule as a request carries it: pointers tell an absent
// member from a zero one. The read-only members a GET returns are
// accepted, so a rule read can be written back, and ignored.
type ruleBody struct {
	ID              *string  `json:"id"`
	Name            *string  `json:"name"`
	Dimension       *string  `json:"dimension"`
	EndpointPattern *string  `json:"endpoint_pattern"`
	Limit           *int64   `json:"limit"`
	WindowSeconds   *int64   `json:"window_seconds"`
	Algorithm       *string  `json:"algorithm"`
	Tier            *string  `json:"tier"`
	Burst           *int64   `json:"burst"`
	Shadow          *bool    `json:"shadow"`
	LeaseSeconds    *float64 `json:"lease_seconds"`
	Enabled         *bool    `json:"enabled"`

	ETag      json.RawMessage `json:"etag"`
	Revision  json.RawMessage `json:"revision"`
	CreatedAt json.RawMessage `json:"created_at"`
	UpdatedAt json.RawMessage `json:"updated_at"`
}

// errs collects the fields at fault of one request.
type errs []core.FieldError

func (e *errs) add(field, format string, args ...any) {
	*e = append(*e, core.FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

// addField adds fe, a refusal of core's validation, under field (its own
// when field is "").
func (e *errs) addField(field string, fe *core.FieldError) {
	if field == "" {
		field = fe.Field
	}
	*e = append(*e, core.FieldError{Field: field, Message: fe.Message})
}

// refusal is the *core.FieldError of err, a refusal of core's validation
// (a policy name's, a limit's).
func refusal(err error) *core.FieldError {
	var fe *core.FieldError
	if errors.As(err, &fe) {
		return fe
	}
	return &core.FieldError{Message: err.Error()}
}

// err is the 400 of the fields collected, nil if none.
func (e errs) err() *apiError {
	if len(e) == 0 {
		return nil
	}
	parts := make([]string, len(e))
	for i, f := range e {
		parts[i] = f.Field + ": " + f.Message
	}
	return &apiError{status: http.StatusBadRequest, detail: strings.Join(parts, "; "), fields: e}
}

// validDimension reports why d cannot name a dimension (as the rules
// file: 1 to 64 of a-z A-Z 0-9 _ . : -), "" if it can.
func validDimension(d string) string {
	if err := core.ValidatePolicyName(d); err != nil {
		if d == "" {
			return "required (user, ip, api_key or any name)"
		}
		return refusal(err).Message
	}
	return ""
}

// validText reports why s cannot be a free-text value of at most max
// bytes, "" if it can.
func validText(s string, max int) string {
	switch {
	case len(s) > max:
		return fmt.Sprintf("longer than %d bytes", max)
	case !utf8.ValidString(s):
		return "not valid UTF-8"
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return "must not contain control characters"
	}
	return ""
}

// validTier reports why t cannot name a tier, "" if it can ("" is no tier).
func validTier(t string) string {
	if t == "" {
		return ""
	}
	if m := validText(t, MaxTier); m != "" {
		return m
	}
	if strings.TrimSpace(t) != t {
		return "must not be blank or start or end with spaces"
	}
	return ""
}

// rule checks b as the rule id (pathID: the path's, "" for a POST) and
// returns it, or a 400 naming every field at fault. It refuses all the
// database (and the engine) would refuse of the rule on its own.
func (b *ruleBody) rule(pathID string) (rulesdb.Rule, *apiError) {
	var e errs
	r := b.stringMembers()
	b.checkID(&e, &r, pathID)
	checkStrings(&e, &r)
	alg := b.algorithm(&e, r.Algorithm)
	b.numbers(&e, &r)
	if b.Shadow != nil {
		r.Shadow = *b.Shadow
	}
	if b.Enabled != nil {
		r.Enabled = *b.Enabled
	}
	if len(e) == 0 {
		l := core.Limit{Algorithm: alg, Rate: r.Limit, Period: time.Duration(r.WindowSeconds) * time.Second, Burst: r.Burst}
		if err := l.Validate(); err != nil {
			e.addField("", rulesdb.LimitField(err))
		}
	}
	if len(e) == 0 {
		if err := rulesdb.ValidateRule(r); err != nil {
			return r, storeError(http.StatusBadRequest, err, false)
		}
	}
	return r, e.err()
}

// stringMembers is the rule of b's string members (absent ones empty),
// enabled.
func (b *ruleBody) stringMembers() rulesdb.Rule {
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	return rulesdb.Rule{
		ID: str(b.ID), Name: str(b.Name), Dimension: str(b.Dimension), EndpointPattern: str(b.EndpointPattern),
		Algorithm: str(b.Algorithm), Tier: str(b.Tier), Enabled: true,
	}
}

// checkID sets r's ID to the path's (pathID; "" for a POST, where b's id
// is required) and adds to e what is wrong with it.
func (b *ruleBody) checkID(e *errs, r *rulesdb.Rule, pathID string) {
	switch {
	case pathID != "" && b.ID != nil && *b.ID != pathID:
		e.add("id", "%q differs from the path's %q (a rule's id cannot change)", clip(*b.ID), clip(pathID))
	case pathID != "":
		r.ID = pathID
	case b.ID == nil:
		e.add("id", "required")
	default:
		if err := core.ValidatePolicyName(r.ID); err != nil {
			e.addField("id", refusal(err))
		}
	}
}

// checkStrings adds to e what is wrong with r's name, dimension, endpoint
// pattern and tier.
func checkStrings(e *errs, r *rulesdb.Rule) {
	if m := validText(r.Name, MaxName); m != "" {
		e.add("name", "%s", m)
	}
	if m := validDimension(r.Dimension); m != "" {
		e.add("dimension", "%s", m)
	}
	if m := validText(r.EndpointPattern, engine.MaxEndpoint); m != "" {
		e.add("endpoint_pattern", "%s", m)
	}
	if m := validTier(r.Tier); m != "" {
		e.add("tier", "%s", m)
	}
}

// algorithm parses name, b's algorithm, adding to e when it is absent or
// unknown.
func (b *ruleBody) algorithm(e *errs, name string) core.Algorithm {
	alg, err := core.ParseAlgorithm(name)
	switch {
	case b.Algorithm == nil:
		e.add("algorithm", "required (%s)", algorithmList())
	case err != nil:
		e.add("algorithm", "%q is not one of %s", clip(name), algorithmList())
	}
	return alg
}

// numbers sets r's limit, window, burst and lease from b, adding to e
// what is absent or out of range.
func (b *ruleBody) numbers(e *errs, r *rulesdb.Rule) {
	if b.Limit == nil {
		e.add("limit", "required: the number of requests per window")
	} else {
		r.Limit = *b.Limit
		if r.Limit < 1 {
			e.add("limit", "must be at least 1, got %d", r.Limit)
		}
	}
	if b.WindowSeconds == nil {
		e.add("window_seconds", "required: the window in seconds")
	} else {
		r.WindowSeconds = *b.WindowSeconds
		if r.WindowSeconds < 1 || r.WindowSeconds > maxWindow {
			e.add("window_seconds", "must be 1 to %d (100 years), got %d", maxWindow, r.WindowSeconds)
		}
	}
	if b.Burst != nil {
		r.Burst = *b.Burst
		if r.Burst < 0 {
			e.add("burst", "must not be negative, got %d", r.Burst)
		}
	}
	if b.LeaseSeconds != nil {
		r.LeaseSeconds = *b.LeaseSeconds
		if !(r.LeaseSeconds >= 0 && r.LeaseSeconds <= maxWindow) {
			e.add("lease_seconds", "must be 0 (none) to %d seconds, got %v", maxWindow, r.LeaseSeconds)
		}
	}
}

// algorithmList is the algorithm names for messages.
func algorithmList() string { return strings.Join(core.AlgorithmNames(), ", ") }

// ruleID reads the path's rule id; an id no rule can have is a 404.
func ruleID(r *http.Request) (string, *apiError) {
	id := r.PathValue("id")
	if core.ValidatePolicyName(id) != nil {
		return "", fail(http.StatusNotFound, "id", "no rule %q", clip(id))
	}
	return id, nil
}

// ruleList is the answer of GET /rules.
type ruleList struct {
	Rules      []*rulesdb.Rule `json:"rules"`
	NextCursor string          `json:"next_cursor"`
}

func (a *api) listRules(w http.ResponseWriter, r *http.Request) *apiError {
	q, e := readQuery(r, "limit", "cursor", "dimension", "tier", "algorithm", "enabled", "id", "name", "endpoint")
	if e != nil {
		return e
	}
	limit, e := q.limit()
	if e != nil {
		return e
	}
	var f rulesdb.RuleFilter
	var fe errs
	if q.has("dimension") {
		f.Dimension = q.get("dimension")
		if m := validDimension(f.Dimension); m != "" {
			fe.add("dimension", "%s", m)
		}
	}
	if q.has("tier") {
		f.Tier = q.get("tier")
		if m := validTier(f.Tier); m != "" || f.Tier == "" {
			fe.add("tier", "must name a tier")
		}
	}
	for _, p := range []struct {
		name string
		dst  *string
	}{{"id", &f.ID}, {"name", &f.Name}, {"endpoint", &f.Endpoint}} {
		*p.dst = q.get(p.name)
		if m := validText(*p.dst, 1024); m != "" {
			fe.add(p.name, "%s", m)
		}
	}
	if q.has("algorithm") {
		f.Algorithm = q.get("algorithm")
		if _, err := core.ParseAlgorithm(f.Algorithm); err != nil {
			fe.add("algorithm", "%q is not one of %s", clip(f.Algorithm), algorithmList())
		}
	}
	if q.has("enabled") {
		switch q.get("enabled") {
		case "true", "false":
			on := q.get("enabled") == "true"
			f.Enabled = &on
		default:
			fe.add("enabled", "must be true or false, got %q", clip(q.get("enabled")))
		}
	}
	if e := fe.err(); e != nil {
		return e
	}
	rs, next, err := a.db.ListRules(r.Context(), f, q.get("cursor"), limit)
	if errors.Is(err, rulesdb.ErrCursor) {
		return bad("cursor", "not a cursor of this listing (use next_cursor as given)")
	}
	if err != nil {
		return a.failed(r, "list rules", err)
	}
	if rs == nil {
		rs = []*rulesdb.Rule{}
	}
	if next != "" {
		w.Header().Set("Link", nextLink(r, next))
	}
	writeJSON(w, http.StatusOK, ruleList{Rules: rs, NextCursor: next})
	return nil
}

func (a *api) getRule(w http.ResponseWriter, r *http.Request) *apiError {
	id, e := ruleID(r)
	if e != nil {
		return e
	}
	if _, e := readQuery(r); e != nil {
		return e
	}
	inm, e := parseETags(r, "If-None-Match")
	if e != nil {
		return e
	}
	rule, err := a.db.Get(r.Context(), id)
	if errors.Is(err, rulesdb.ErrNotFound) {
		return fail(http.StatusNotFound, "id", "no rule %q", id)
	}
	if err != nil {
		return a.failed(r, "get rule", err)
	}
	w.Header().Set("ETag", rule.ETag)
	if inm.matches(rule.ETag, true) {
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	writeJSON(w, http.StatusOK, rule)
	return nil
}

func (a *api) createRule(w http.ResponseWriter, r *http.Request) *apiError {
	actor, e := a.actor(r)
	if e != nil {
		return e
	}
	if _, e := readQuery(r); e != nil {
		return e
	}
	var b ruleBody
	if e := readJSON(w, r, &b); e != nil {
		return e
	}
	rule, e := b.rule("")
	if e != nil {
		return e
	}
	stored, err := a.db.Create(r.Context(), actor, rule)
	if e := a.writeError(r, "create rule", err); e != nil {
		return e
	}
	if e := a.inForce(r, stored.Revision); e != nil {
		return e
	}
	w.Header().Set("Location", locationOf("/rules/%s", stored.ID))
	w.Header().Set("ETag", stored.ETag)
	writeJSON(w, http.StatusCreated, stored)
	return nil
}

func (a *api) putRule(w http.ResponseWriter, r *http.Request) *apiError {
	id, e := ruleID(r)
	if e != nil {
		return e
	}
	actor, e := a.actor(r)
	if e != nil {
		return e
	}
	if _, e := readQuery(r); e != nil {
		return e
	}
	im, e := ifMatch(r)
	if e != nil {
		return e
	}
	var b ruleBody
	if e := readJSON(w, r, &b); e != nil {
		return e
	}
	rule, e := b.rule(id)
	if e != nil {
		return e
	}
	etag, e := a.current(r, id, im)
	if e != nil {
		return e
	}
	stored, err := a.db.Update(r.Context(), actor, rule, etag)
	if e := a.writeError(r, "update rule", err); e != nil {
		return e
	}
	if e := a.inForce(r, stored.Revision); e != nil {
		return e
	}
	w.Header().Set("ETag", stored.ETag)
	writeJSON(w, http.StatusOK, stored)
	return nil
}

func (a *api) deleteRule(w http.ResponseWriter, r *http.Request) *apiError {
	id, e := ruleID(r)
	if e != nil {
		return e
	}
	actor, e := a.actor(r)
	if e != nil {
		return e
	}
	if _, e := readQuery(r); e != nil {
		return e
	}
	im, e := ifMatch(r)
	if e != nil {
		return e
	}
	etag, e := a.current(r, id, im)
	if e != nil {
		return e
	}
	rev, err := a.db.Delete(r.Context(), actor, id, etag)
	if e := a.writeError(r, "delete rule", err); e != nil {
		return e
	}
	if e := a.inForce(r, rev); e != nil {
		return e
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// current returns the etag of rule id if im matches it (a 404 if there is
// no rule id, a 412 if im does not match): the write is then made under
// that etag, which the database checks again in its transaction.
func (a *api) current(r *http.Request, id string, im etags) (string, *apiError) {
	cur, err := a.db.Get(r.Context(), id)
	if errors.Is(err, rulesdb.ErrNotFound) {
		return "", fail(http.StatusNotFound, "id", "no rule %q", id)
	}
	if err != nil {
		return "", a.failed(r, "get rule", err)
	}
	if !im.matches(cur.ETag, false) {
		return "", fail(http.StatusPreconditionFailed, "If-Match", "the rule's etag is %s: it changed since it was read", cur.ETag)
	}
	return cur.ETag, nil
}

// writeError translates a write's error: nil for none.
func (a *api) writeError(r *http.Request, op string, err error) *apiError {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, rulesdb.ErrExists):
		return fail(http.StatusConflict, "id", "a rule with this id exists")
	case errors.Is(err, rulesdb.ErrNotFound):
		return fail(http.StatusNotFound, "id", "no such rule")
	case errors.Is(err, rulesdb.ErrStale):
		return fail(http.StatusPreconditionFailed, "If-Match", "the rule changed since it was read")
	case errors.Is(err, rulesdb.ErrInvalid):
		// The rule is valid alone (checked before): the set it would make
		// with the stored rules is not.
		return storeError(http.StatusConflict, err, true)
	}
	return a.failed(r, op, err)
}

// etags is a parsed If-Match or If-None-Match: "*" or a list of
// entity-tags; absent when the request has no such field.
type etags struct {
	present, any bool
	tags         []string // as written, W/ kept
}

// ifMatch reads If-Match, which a write requires (428 without it).
func ifMatch(r *http.Request) (etags, *apiError) {
	im, e := parseETags(r, "If-Match")
	if e == nil && !im.present {
		return im, fail(http.StatusPreconditionRequired, "If-Match", "required: the rule's ETag as read (GET), or *")
	}
	return im, e
}

// parseETags reads the header field name (RFC 9110 section 13.1).
func parseETags(r *http.Request, name string) (etags, *apiError) {
	vs := r.Header.Values(name)
	if len(vs) == 0 {
		return etags{}, nil
	}
	v := strings.TrimSpace(strings.Join(vs, ","))
	out := etags{present: true}
	if v == "*" {
		out.any = true
		return out, nil
	}
	for v != "" {
		weak := strings.HasPrefix(v, "W/")
		t := strings.TrimPrefix(v, "W/")
		if len(t) < 2 || t[0] != '"' {
			return etags{}, bad(name, "must be * or a list of entity-tags (\"1\", W/\"1\")")
		}
		end := strings.IndexByte(t[1:], '"')
		if end < 0 {
			return etags{}, bad(name, "unterminated entity-tag")
		}
		tag := t[:end+2]
		for i := 1; i < len(tag)-1; i++ {
			if c := tag[i]; c < 0x21 || c == 0x7f {
				return etags{}, bad(name, "entity-tags hold no spaces or control characters")
			}
		}
		if weak {
			tag = "W/" + tag
		}
		out.tags = append(out.tags, tag)
		v = strings.TrimLeft(t[end+2:], " \t")
		if v == "" {
			break
		}
		if v[0] != ',' {
			return etags{}, bad(name, "entity-tags are separated by commas")
		}
		v = strings.TrimLeft(v[1:], " \t,")
	}
	if len(out.tags) == 0 {
		return etags{}, bad(name, "must be * or a list of entity-tags")
	}
	return out, nil
}

// matches reports whether the list names etag: with weak comparison
// (If-None-Match) W/"1" matches "1"; with strong (If-Match) a weak tag
// matches nothing.
func (t etags) matches(etag string, weak bool) bool {
	if !t.present {
		return false
	}
	if t.any {
		return true
	}
	for _, tag := range t.tags {
		if strings.HasPrefix(tag, "W/") {
			if weak && tag[2:] == etag {
				return true
			}
			continue
		}
		if tag == etag {
			return true
		}
	}
	return false
}
