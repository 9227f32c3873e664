package adminapi

import (
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/internal/rawtext/rawtexttest"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// samples are a valid request body of every resource and method that
// takes one, by "METHOD pattern": every string member of it is sent again
// with each invalid sequence. A resource added to table() that takes a
// body fails TestInvalidUTF8Refused until it has its sample here.
var samples = map[string]string{
	"POST /rules": `{"id":"orders","name":"Orders","dimension":"user","endpoint_pattern":"/api/orders/**","limit":5,` +
		`"window_seconds":60,"algorithm":"fixed_window","tier":"","burst":0,"shadow":false,"enabled":true,` +
		`"etag":"\"1\"","revision":1,"created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z"}`,
	"PUT /rules/{id}":           `{"id":"orders","name":"Orders","dimension":"user","endpoint_pattern":"/api/orders/**","limit":5,"window_seconds":60,"algorithm":"fixed_window","tier":"","etag":"\"1\""}`,
	"PUT /users/{id}/tier":      `{"tier":"gold"}`,
	"POST /users/{id}/override": `{"rule_id":"orders","limit":10,"window_seconds":60,"block":false,"expires_at":"2030-01-01T00:00:00Z","ttl_seconds":60}`,
}

// pathValues are valid values of the table's wildcards.
var pathValues = map[string]string{"id": "orders", "rule": "orders"}

// bodyMethods are the methods whose requests carry a body.
var bodyMethods = []string{http.MethodPost, http.MethodPut}

// An admin request with text that is not valid UTF-8 anywhere (a JSON
// body's member, value or raw bytes; a query parameter's name or value; a
// path wildcard), in every field of every resource and method of the
// router, of every kind of invalid sequence (and every unpaired surrogate
// escape in JSON), is 400 problem+json naming the field, and nothing is
// written. encoding/json would have stored U+FFFD (SQLite) or failed
// (PostgreSQL refuses invalid UTF-8 in text: 503).
func TestInvalidUTF8Refused(t *testing.T) {
	onEach(t, func(t *testing.T, e *env) {
		r := e.req(http.MethodPost, "/api/v1/rules", ordersRule)
		require.Equal(t, http.StatusCreated, r.status, r.raw)
		before, audit := e.revision(), e.auditLen()
		sent := 0
		for _, rt := range e.api.table() {
			for _, method := range slices.Sorted(func(yield func(string) bool) {
				for m := range rt.methods {
					if !yield(m) {
						return
					}
				}
			}) {
				sent += e.refuseEverywhere(t, method, rt.pattern)
			}
		}
		require.Equal(t, before, e.revision(), "nothing written")
		require.Equal(t, audit, e.auditLen())
		t.Logf("%d requests refused", sent)
	})
}

func (e *env) auditLen() int {
	e.t.Helper()
	rows, _, err := e.db.AuditQuery(e.ctx, rulesdb.AuditFilter{Limit: rulesdb.MaxPage})
	require.NoError(e.t, err)
	return len(rows)
}

var wildcard = regexp.MustCompile(`\{([a-z]+)\}`)

// refuseEverywhere sends method pattern with each invalid sequence in each
// of its fields and checks each answer; it returns how many it sent.
func (e *env) refuseEverywhere(t *testing.T, method, pattern string) int {
	t.Helper()
	name := method + " " + pattern
	sample, hasBody := samples[name]
	if slices.Contains(bodyMethods, method) {
		require.True(t, hasBody, "%s takes a body: add a sample to samples", name)
	}
	path := func(bad map[string]string) string {
		return Prefix + wildcard.ReplaceAllStringFunc(pattern, func(w string) string {
			n := w[1 : len(w)-1]
			if v, ok := bad[n]; ok {
				return url.PathEscape(v)
			}
			return pathValues[n]
		})
	}
	send := func(p, body string) reply {
		return e.req(method, p, body, "If-Match", "*")
	}
	known := e.queryParams(method, path(nil))
	n := 0
	for _, s := range rawtexttest.Invalid {
		for _, m := range wildcard.FindAllStringSubmatch(pattern, -1) {
			requireProblem(t, send(path(map[string]string{m[1]: s.Bytes}), sample), http.StatusBadRequest, m[1])
			n++
		}
		for _, q := range append(known, "zz_unknown") {
			requireProblem(t, send(path(nil)+"?"+q+"="+url.QueryEscape(s.Bytes), sample), http.StatusBadRequest, q)
			n++
		}
		requireProblem(t, send(path(nil)+"?"+url.QueryEscape("n"+s.Bytes)+"=1", sample), http.StatusBadRequest, "query")
		n++
	}
	if hasBody {
		n += e.refuseInBody(t, method, path(nil), sample)
	}
	return n
}

// queryParams are the query parameters a resource knows, as its answer to
// an unknown one lists them.
func (e *env) queryParams(method, path string) []string {
	r := e.req(method, path+"?zz_probe=1", samples[method+" "+strings.TrimPrefix(path, Prefix)])
	if r.status != http.StatusBadRequest || r.field() != "zz_probe" {
		return nil
	}
	detail, _ := r.body["detail"].(string)
	_, list, ok := strings.Cut(detail, "(known: ")
	if !ok {
		return nil
	}
	list, _, _ = strings.Cut(list, ")")
	return strings.Split(list, ", ")
}

// refuseInBody sends sample with each string member's value, and its
// name, made invalid, and with invalid bytes outside any string.
func (e *env) refuseInBody(t *testing.T, method, path, sample string) int {
	t.Helper()
	var members map[string]any
	require.NoError(t, json.Unmarshal([]byte(sample), &members))
	n := 0
	for _, s := range append(append([]rawtexttest.Sample{}, rawtexttest.Invalid...), rawtexttest.Escapes...) {
		for member, v := range members {
			str, ok := v.(string)
			if !ok {
				continue
			}
			quoted, err := json.Marshal(str)
			require.NoError(t, err)
			body := strings.Replace(sample, `"`+member+`":`+string(quoted), `"`+member+`":"`+s.Bytes+string(quoted[1:]), 1)
			require.NotEqual(t, sample, body, member)
			r := e.req(method, path, body, "If-Match", "*")
			requireProblem(t, r, http.StatusBadRequest, member)
			require.Regexp(t, "UTF-8|surrogate", r.body["detail"], r.raw)
			n++
		}
		body := strings.Replace(sample, `{"`, `{"n`+s.Bytes+`":1,"`, 1)
		requireProblem(t, e.req(method, path, body, "If-Match", "*"), http.StatusBadRequest, "body")
		n++
	}
	for _, s := range rawtexttest.Invalid {
		requireProblem(t, e.req(method, path, strings.Replace(sample, "{", "{ "+s.Bytes, 1), "If-Match", "*"), http.StatusBadRequest, "body")
		n++
	}
	return n
}
