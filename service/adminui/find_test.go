package adminui

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/rulesdb"
)

var ruleRowRe = regexp.MustCompile(`<tr data-rule="([^"]+)">`)

// rulesListed returns the rule IDs of a rules page, in order.
func rulesListed(body string) []string {
	var ids []string
	for _, m := range ruleRowRe.FindAllStringSubmatch(body, -1) {
		ids = append(ids, m[1])
	}
	return ids
}

var nextRe = regexp.MustCompile(`id="next" href="([^"]+)"|href="([^"]+)" id="next"`)

// nextLink returns the page's link to its next page, "" without one.
func nextLink(body string) string {
	m := nextRe.FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return html.UnescapeString(m[1] + m[2])
}

// seedRules stores rules for the searches: three of the name "Checkout"
// (any case) on two algorithms, and others.
func seedRules(t *testing.T, s *stack) {
	t.Helper()
	ctx := context.Background()
	for i, r := range []rulesdb.Rule{
		{ID: "checkout-eu", Name: "Checkout EU", EndpointPattern: "/api/checkout/eu/**", Algorithm: "gcra"},
		{ID: "checkout-us", Name: "checkout US", EndpointPattern: "/api/checkout/us/**", Algorithm: "gcra"},
		{ID: "checkout-ip", Name: "CHECKOUT by ip", Dimension: "ip", EndpointPattern: "/api/checkout/**", Algorithm: "token_bucket"},
		{ID: "search", Name: "Search", EndpointPattern: "/api/search", Algorithm: "fixed_window"},
		{ID: "search-gold", Name: "Search", EndpointPattern: "/api/search", Algorithm: "fixed_window", Tier: "gold"},
	} {
		if r.Dimension == "" {
			r.Dimension = "user"
		}
		r.Limit, r.WindowSeconds, r.Enabled = int64(10+i), 60, true
		_, err := s.db.Create(ctx, "setup", r)
		require.NoError(t, err)
	}
}

// The rules page searches by ID, name, dimension, endpoint, tier,
// algorithm and enabled, alone or together, and pages by key within the
// search: the next page's link keeps the filters.
func TestRulesSearch(t *testing.T) {
	onEachDB(t, func(t *testing.T, s *stack) {
		seedRules(t, s)
		c := s.client()
		c.login(s.read) // searching is reading
		for _, tc := range []struct {
			query string
			want  []string
		}{
			{"", []string{"checkout-eu", "checkout-ip", "checkout-us", "orders", "search", "search-gold"}},
			{"name=checkout", []string{"checkout-eu", "checkout-ip", "checkout-us"}},
			{"name=checkout&algorithm=gcra", []string{"checkout-eu", "checkout-us"}},
			{"name=checkout&dimension=ip", []string{"checkout-ip"}},
			{"id=out-u", []string{"checkout-us"}},
			{"endpoint=%2Fsearch", []string{"search", "search-gold"}},
			{"tier=gold", []string{"search-gold"}},
			{"enabled=no", nil},
			{"name=nothing+like+it", nil},
		} {
			r := c.get("/admin/?" + tc.query)
			require.Equal(t, http.StatusOK, r.status, tc.query)
			require.Equal(t, tc.want, rulesListed(r.body), tc.query)
			if tc.want == nil {
				require.Contains(t, r.body, "No rule matches these filters.")
			}
		}
		r := c.get("/admin/?name=checkout&algorithm=gcra")
		require.Contains(t, r.body, `<option selected>gcra</option>`, "the form keeps what was asked")
		require.Contains(t, r.body, `id="f-name" name="name" value="checkout"`)
	})
}

// A page of the rules search holds rulesPerPage rules; the next page's
// link keeps the filters and the pages together list every match once.
func TestRulesSearchPages(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	want := []string{}
	for i := range rulesPerPage + 5 {
		id := fmt.Sprintf("bulk-%03d", i)
		_, err := s.db.Create(ctx, "setup", rulesdb.Rule{ID: id, Name: "Bulk", Dimension: "user", EndpointPattern: "/bulk/" + id,
			Limit: 5, WindowSeconds: 60, Algorithm: "gcra", Enabled: true})
		require.NoError(t, err)
		want = append(want, id)
	}
	c := s.client()
	c.login(s.write)
	var got []string
	path := "/admin/?name=bulk&algorithm=gcra"
	for range 3 {
		r := c.get(path)
		require.Equal(t, http.StatusOK, r.status)
		got = append(got, rulesListed(r.body)...)
		if path = nextLink(r.body); path == "" {
			break
		}
		u, err := url.Parse(path)
		require.NoError(t, err)
		require.Equal(t, "bulk", u.Query().Get("name"))
		require.Equal(t, "gcra", u.Query().Get("algorithm"))
		require.NotEmpty(t, u.Query().Get("cursor"))
	}
	require.Equal(t, want, got)
}

// A filter the search cannot take is 400 naming its field, with no rules
// listed; hostile text is shown as text in the form.
func TestFindRefusesBadFilters(t *testing.T) {
	s := newStack(t)
	c := s.client()
	c.login(s.write)
	for _, tc := range []struct{ path, field string }{
		{"/admin/?algorithm=fastest", "algorithm"},
		{"/admin/?enabled=maybe", "enabled"},
		{"/admin/?name=" + url.QueryEscape("a\x00b"), "name"},
		{"/admin/?id=" + strings.Repeat("x", maxFilter+1), "id"},
		{"/admin/?cursor=bm9wZQ", "cursor"},
		{"/admin/audit?since=yesterday", "since"},
		{"/admin/audit?since=2026-12-02&until=2026-12-01", "until"},
		{"/admin/audit?cursor=bm9wZQ", "cursor"},
		{"/admin/callers?identifier=" + url.QueryEscape("\x00"), "identifier"},
		{"/admin/callers?cursor=bm9wZQ", "cursor"},
	} {
		r := c.get(tc.path)
		require.Equal(t, http.StatusBadRequest, r.status, tc.path)
		require.Contains(t, r.body, tc.field+":", tc.path)
		require.NotContains(t, r.body, `<tr data-rule=`, tc.path)
	}
	r := c.get("/admin/?name=" + url.QueryEscape(hostile))
	require.Equal(t, http.StatusOK, r.status)
	require.NotContains(t, r.body, hostile)
	require.Contains(t, r.body, html.EscapeString(hostile))
}

// The audit page filters by actor, action (exact or a prefix), target and
// time, and shows each change field by field with who, when and the
// request id; its pages keep the filters.
func TestAuditFindAndDiff(t *testing.T) {
	onEachDB(t, func(t *testing.T, s *stack) {
		ctx := context.Background()
		c := s.client()
		c.login(s.write)
		f := ruleForm(t, c.get("/admin/rules/orders").body)
		f.Set("limit", "3")
		f.Set("tier", "")
		f.Set("name", "Orders (EU)")
		saved := c.post("/admin/rules/orders", f)
		require.Equal(t, http.StatusSeeOther, saved.status)
		_, err := s.db.SetTier(ctx, "carol", "user", "u1", "gold")
		require.NoError(t, err)

		r := c.get("/admin/audit?action=rule.update")
		require.Equal(t, http.StatusOK, r.status)
		require.Equal(t, 1, strings.Count(r.body, `<tr data-revision=`))
		require.Contains(t, r.body, `<td class="actor">alice</td><td>rule.update</td><td class="mono target">rule/orders</td>`)
		require.Contains(t, r.body, `<td class="mono request">`+saved.header.Get("X-Request-Id")+`</td>`)
		require.Contains(t, r.body, `<tr data-field="limit"><th scope="row" class="mono">limit</th>`+"\n"+`<td class="before"><del>10</del></td>`)
		require.Contains(t, r.body, `<td class="after"><ins>3</ins></td>`)
		require.Contains(t, r.body, `<ins>Orders (EU)</ins>`)
		require.NotContains(t, r.body, `data-field="window_seconds"`, "unchanged fields are not listed")
		require.Contains(t, r.body, "also set by the store: etag, revision, updated_at")

		for _, tc := range []struct {
			query string
			want  int
		}{
			{"action=rule.", 2}, // the setup's create and the update
			{"action=rule", 0},
			{"action=tier.&actor=carol", 1},
			{"actor=carol&action=rule.", 0},
			{"target=rule%2F", 2},
			{"target=tier%2Fuser%2F", 1},
			{"since=" + url.QueryEscape(time.Now().UTC().Add(time.Hour).Format("2006-01-02 15:04")), 0},
			{"until=" + url.QueryEscape(time.Now().UTC().Add(time.Hour).Format(time.RFC3339)), 5},
			{"since=2000-01-01&until=2000-01-02", 0},
		} {
			r := c.get("/admin/audit?" + tc.query)
			require.Equal(t, http.StatusOK, r.status, tc.query)
			require.Equal(t, tc.want, strings.Count(r.body, `<tr data-revision=`), tc.query)
		}
	})
}

// The audit's pages (100 entries each) keep the filters and list each
// entry once.
func TestAuditFindPages(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	for i := range auditPage + 20 {
		_, err := s.db.SetTier(ctx, "dana", "user", fmt.Sprintf("u%03d", i), "gold")
		require.NoError(t, err)
	}
	c := s.client()
	c.login(s.read)
	seen := map[string]bool{}
	path := "/admin/audit?actor=dana&action=tier."
	pages := 0
	for ; path != "" && pages < 4; pages++ {
		r := c.get(path)
		require.Equal(t, http.StatusOK, r.status)
		for _, m := range regexp.MustCompile(`<tr data-revision="(\d+)">`).FindAllStringSubmatch(r.body, -1) {
			require.False(t, seen[m[1]], "revision %s twice", m[1])
			seen[m[1]] = true
		}
		path = nextLink(r.body)
		if path != "" {
			u, err := url.Parse(path)
			require.NoError(t, err)
			require.Equal(t, "dana", u.Query().Get("actor"))
			require.Equal(t, "tier.", u.Query().Get("action"))
		}
	}
	require.Equal(t, 2, pages)
	require.Len(t, seen, auditPage+20)
}

// The callers page lists the callers with a tier or an override, by
// dimension and identifier prefix, each linked to its limits.
func TestCallersSearch(t *testing.T) {
	onEachDB(t, func(t *testing.T, s *stack) {
		ctx := context.Background()
		for _, id := range []string{"alice", "albert", "bob"} {
			_, err := s.db.SetTier(ctx, "setup", "user", id, "gold")
			require.NoError(t, err)
		}
		_, err := s.db.SetOverride(ctx, "setup", rulesdb.Override{Dimension: "user", Identifier: "alice", RuleID: "orders", Block: true,
			ExpiresAt: time.Now().Add(time.Hour)})
		require.NoError(t, err)
		c := s.client()
		c.login(s.read)
		r := c.get("/admin/callers?dimension=user&identifier=al")
		require.Equal(t, http.StatusOK, r.status)
		require.Equal(t, 2, strings.Count(r.body, `<tr data-caller=`))
		require.Contains(t, r.body, `<a href="/admin/users?dimension=user&amp;id=alice">alice</a>`)
		require.Contains(t, r.body, `<td>gold</td><td class="num">1</td>`)
		require.Contains(t, r.body, `<a href="/admin/users?dimension=user&amp;id=albert">albert</a>`)
		r = c.get("/admin/callers?dimension=ip")
		require.Contains(t, r.body, "No caller matches these filters.")
		r = c.get("/admin/callers")
		require.Equal(t, 3, strings.Count(r.body, `<tr data-caller=`))
	})
}

// A read session searches everything and changes nothing: posting to the
// search pages is refused and nothing is written; a caller's hostile
// identifier is text on the callers page, its link escaped.
func TestFindReadOnlyAndHostile(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	_, err := s.db.SetTier(ctx, "setup", "user", hostile+"&id=x", "gold")
	require.NoError(t, err)
	c := s.client()
	c.login(s.read)
	r := c.get("/admin/callers?identifier=" + url.QueryEscape(hostile[:3]))
	require.Equal(t, http.StatusOK, r.status)
	require.NotContains(t, r.body, hostile)
	require.Contains(t, r.body, html.EscapeString(hostile+"&id=x")+"</a>")
	m := regexp.MustCompile(`<a href="(/admin/users\?[^"]+)">`).FindStringSubmatch(r.body)
	require.NotNil(t, m)
	link, err := url.Parse(html.UnescapeString(m[1]))
	require.NoError(t, err)
	require.Equal(t, hostile+"&id=x", link.Query().Get("id"), "the identifier is one query value")
	r = c.get("/admin/audit?target=" + url.QueryEscape("tier/user/"))
	require.Equal(t, 1, strings.Count(r.body, `<tr data-revision=`))
	require.NotContains(t, r.body, hostile)
	page := c.get("/admin/").body
	before := s.revision()
	for _, path := range []string{"/admin/", "/admin/audit", "/admin/callers"} {
		r := c.post(path, url.Values{"csrf": {csrf(t, page)}, "name": {"x"}})
		require.Equal(t, http.StatusForbidden, r.status, path)
	}
	require.Equal(t, before, s.revision(), "nothing written")
}
