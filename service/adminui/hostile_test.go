package adminui

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rulesdb"
)

const hostile = `<script>alert("x")</script>"'><img src=x onerror=alert(1)>`

// TestHostileInputIsShownAsText puts markup wherever the page shows what
// others wrote (a rule's name and endpoint, a caller's identifier, the
// audit's filters and rows, the recent callers): it is shown as text, never
// as markup.
func TestHostileInputIsShownAsText(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	_, err := s.db.Create(ctx, "setup", rulesdb.Rule{ID: "evil", Name: hostile, Dimension: "user", EndpointPattern: "/x/" + url.PathEscape("<b>"),
		Limit: 3, WindowSeconds: 60, Algorithm: "gcra", Enabled: true})
	require.NoError(t, err)
	rev := s.revision()
	waitRevision(t, s, rev)
	for range 5 { // the caller with a hostile identifier is warned, then throttled
		_, err := s.eng.Check(ctx, engine.Check{Dimension: "user", Identifier: hostile, Endpoint: "/x/%3Cb%3E", Cost: 1})
		require.NoError(t, err)
	}
	c := s.client()
	c.login(s.write)
	q := url.QueryEscape(hostile)
	for _, p := range []string{"/admin/", "/admin/rules/evil", "/admin/users?dimension=user&id=" + q, "/admin/users?dimension=" + q + "&id=" + q,
		"/admin/audit?actor=" + q + "&target=" + q, "/admin/audit", "/admin/recent", "/admin/recent?rule=" + q, "/admin/rules/" + url.PathEscape(hostile)} {
		r := c.get(p)
		require.Contains(t, []int{http.StatusOK, http.StatusBadRequest, http.StatusNotFound}, r.status, p)
		low := strings.ToLower(r.body)
		require.NotContains(t, low, "<script", p)
		require.NotContains(t, low, "<img", p)
		require.NotContains(t, low, "<b>", p)
	}
	r := c.get("/admin/rules/evil")
	require.Contains(t, r.body, `&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;`)
	r = c.get("/admin/recent")
	require.Regexp(t, `<td class="mono"><a href="/admin/users\?dimension=user&amp;id=[^"]*">&lt;script&gt;alert\(&#34;x&#34;\)&lt;/script&gt;`, r.body, "the throttled caller, as text")
	require.Contains(t, r.body, `<td class="state-throttled">throttled</td>`)
	r = c.get("/admin/")
	require.Regexp(t, `(?s)<tr data-rule="evil">.*?<td class="num warned">1</td><td class="num throttled">1</td>`, r.body, "the rules page counts the caller warned, then throttled, in both")
	r = c.get("/admin/users?dimension=user&id=" + q)
	require.Equal(t, http.StatusOK, r.status)
	require.Contains(t, r.body, `&lt;script&gt;`)
	require.Contains(t, r.body, `data-rule="evil"`)
}

func TestUsersPage(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	for range 3 {
		res, err := s.eng.Check(ctx, engine.Check{Dimension: "user", Identifier: "u7", Endpoint: "/api/orders/1", Cost: 1})
		require.NoError(t, err)
		require.True(t, res.Allowed)
	}
	c := s.client()
	c.login(s.read)
	r := c.get("/admin/users")
	require.Equal(t, http.StatusOK, r.status)
	require.NotContains(t, r.body, `id="usage"`)
	r = c.get("/admin/users?dimension=user&id=u7")
	require.Equal(t, http.StatusOK, r.status)
	require.Regexp(t, `(?s)<tr data-rule="orders">.*?<td class="num">3</td><td class="num">7</td><td class="num">10</td>`, r.body, "used 3 of 10")
	r = c.get("/admin/users?dimension=user&id=" + strings.Repeat("x", engine.MaxIdentifier+1))
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Contains(t, r.body, "identifier")
}

func TestAuditPage(t *testing.T) {
	onEachDB(t, func(t *testing.T, s *stack) {
		ctx := context.Background()
		c := s.client()
		c.login(s.write)
		f := ruleForm(t, c.get("/admin/rules/orders").body)
		f.Set("limit", "7")
		require.Equal(t, http.StatusSeeOther, c.post("/admin/rules/orders", f).status)
		_, err := s.db.SetTier(ctx, "carol", "user", "u1", "gold")
		require.NoError(t, err)

		r := c.get("/admin/audit")
		require.Equal(t, http.StatusOK, r.status)
		for _, want := range []string{`<td class="actor">alice</td><td>rule.update</td>`, `<td class="actor">carol</td><td>tier.set</td>`, `<td class="actor">setup</td><td>token.create</td>`} {
			require.Contains(t, r.body, want)
		}
		r = c.get("/admin/audit?actor=alice")
		require.Contains(t, r.body, `<td class="actor">alice</td>`)
		require.NotContains(t, r.body, `<td class="actor">carol</td>`)
		r = c.get("/admin/audit?target=tier/")
		require.Contains(t, r.body, `tier/user/u1`)
		require.NotContains(t, r.body, `rule/orders`)
		require.Equal(t, http.StatusBadRequest, c.get("/admin/audit?cursor=bogus").status)
	})
}

func TestOverridesPage(t *testing.T) {
	onEachDB(t, func(t *testing.T, s *stack) {
		ctx := context.Background()
		until := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
		_, err := s.db.SetOverride(ctx, "carol", rulesdb.Override{Dimension: "user", Identifier: "u9", RuleID: "orders", Limit: 1, WindowSeconds: 60, ExpiresAt: until})
		require.NoError(t, err)
		_, err = s.db.SetOverride(ctx, "carol", rulesdb.Override{Dimension: "user", Identifier: "banned", RuleID: "orders", Block: true, ExpiresAt: until.Add(-time.Minute)})
		require.NoError(t, err)
		waitRevision(t, s, s.revision())
		c := s.client()
		c.login(s.read)
		r := c.get("/admin/overrides")
		require.Equal(t, http.StatusOK, r.status)
		require.Regexp(t, `(?s)id=banned">banned</a></td>\s*<td>blocked</td><td>`+fmtTime(until.Add(-time.Minute))+`.*id=u9">u9</a></td>\s*<td>1/1m0s fixed_window</td><td>`+fmtTime(until), r.body,
			"both overrides, the soonest to lapse first, with their expiry")

		r = c.get("/admin/users?dimension=user&id=u9")
		require.Equal(t, http.StatusOK, r.status)
		require.Contains(t, r.body, "override until "+fmtTime(until))
		require.Regexp(t, `(?s)id="user-overrides".*<td class="mono">orders</td><td>1/1m0s fixed_window</td><td>`+fmtTime(until), r.body)
		r = c.get("/admin/users?dimension=user&id=banned")
		require.Regexp(t, `(?s)<tr data-rule="orders">.*?<td>blocked</td>`, r.body)
	})
}

func TestLongListsAreCapped(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	for i := range maxListed + 5 {
		_, err := s.eng.Check(ctx, engine.Check{Dimension: "user", Identifier: "c" + strconv.Itoa(i), Endpoint: "/api/orders/1", Cost: 9})
		require.NoError(t, err)
	}
	c := s.client()
	c.login(s.read)
	r := c.get("/admin/recent")
	require.Equal(t, maxListed, strings.Count(r.body, `<td class="state-warning">`))
	require.True(t, strings.Contains(r.body, `and 5 more not shown`), "the rest counted")
	require.True(t, regexp.MustCompile(`(?s)<tr data-rule="orders">.*?<td class="num warned">1005</td>`).MatchString(c.get("/admin/").body), "all counted on the rules page")
}
