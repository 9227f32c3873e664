package adminui

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/internal/rawtext/rawtexttest"
)

// queryParams are the query parameters the pages read (any other is
// checked the same way: "zz").
var queryParams = []string{"cursor", "saved", "deleted", "done", "dimension", "id", "actor", "target", "rule", "zz"}

// A request to any route of the page's router (table) with text that is
// not valid UTF-8 in a path wildcard, a query parameter's name or value,
// or any field of its form, of every kind of invalid sequence, is answered
// 400 naming the field, and nothing is written: the session is not even
// signed out.
func TestInvalidUTF8Refused(t *testing.T) {
	onEachDB(t, func(t *testing.T, s *stack) {
		c := s.client()
		c.login(s.write)
		page := c.get("/admin/rules/orders").body
		forms := validForms(t, s, page)
		before := s.revision()
		sent := 0
		refused := func(r resp, field string) {
			t.Helper()
			require.Equal(t, http.StatusBadRequest, r.status, r.body)
			require.Contains(t, r.body, "Bad request: "+field+": ", r.body)
			sent++
		}
		for _, p := range s.h.table() {
			method, path, ok := strings.Cut(p.pattern, " ")
			if !ok {
				method, path = http.MethodGet, p.pattern+"anything"
			}
			path = strings.ReplaceAll(path, "{$}", "")
			form := forms[p.pattern]
			if method == http.MethodPost {
				require.NotNil(t, form, "%s takes a form: add a valid one to forms", p.pattern)
			}
			at := func(id string) string { return strings.ReplaceAll(path, "{id}", url.PathEscape(id)) }
			for _, smp := range rawtexttest.Invalid {
				if strings.Contains(path, "{id}") {
					refused(c.do(method, at(smp.Bytes), form), "id")
				}
				for _, q := range queryParams {
					refused(c.do(method, at("orders")+"?"+q+"="+url.QueryEscape(smp.Bytes), form), q)
				}
				refused(c.do(method, at("orders")+"?"+url.QueryEscape("n"+smp.Bytes)+"=1", form), "query")
				for _, f := range p.form {
					bad := url.Values{}
					for k, v := range form {
						bad[k] = v
					}
					bad.Set(f, "x"+smp.Bytes)
					refused(c.do(method, at("orders"), bad), f)
				}
				if method == http.MethodPost {
					bad := url.Values{"n" + smp.Bytes: {"1"}}
					for k, v := range form {
						bad[k] = v
					}
					refused(c.do(method, at("orders"), bad), "form")
				}
			}
		}
		require.Equal(t, before, s.revision(), "nothing written")
		require.Equal(t, http.StatusOK, c.get("/admin/").status, "still signed in")
		t.Logf("%d requests refused", sent)
	})
}
