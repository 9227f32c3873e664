package main

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/internal/browsertest"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// checkAt asks p's HTTP check API for one request of user id on endpoint
// and returns whether it was allowed.
func checkAt(t *testing.T, c *http.Client, p instance, id, endpoint string) bool {
	t.Helper()
	body := `{"key_type": "user", "key_value": "` + id + `", "endpoint": "` + endpoint + `"}`
	resp, err := c.Post(p.URL("/api/v1/rate-limit/check"), "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	var out struct {
		Allowed bool `json:"allowed"`
	}
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return out.Allowed
}

// An operator manages a running `ratelimitd serve --db` from its admin page
// in a real headless Chromium, each step answered once in force on the
// instance, so the check API's next answers follow it: a new rule is
// refused with its field marked and nothing stored, then created, and
// decides checks (3 an hour: the fourth denied); a caller blocked under it
// is denied from its first check while another is not; the block cleared,
// it is admitted; the rule deleted, nothing limits its callers; the audit
// page lists each change under the operator's token. A read token sees the
// caller's page without its forms, and a form forced into the page is
// refused with nothing written. Every page is screenshotted
// (SLUICE_SHOTS_DIR keeps them).
func TestBrowserManagesRatelimitd(t *testing.T) {
	t.Parallel()
	ctx := dbctx(t)
	dsn := "file:" + filepath.Join(t.TempDir(), "rules.db")
	db, err := rulesdb.Open(ctx, dsn)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Create(ctx, "setup", ordersRule(10))
	require.NoError(t, err)
	ops, _, err := db.CreateToken(ctx, "setup", "ops", rulesdb.ScopeWrite)
	require.NoError(t, err)
	viewer, _, err := db.CreateToken(ctx, "setup", "viewer", rulesdb.ScopeRead)
	require.NoError(t, err)
	p := startServer(t, nil, "--db", dsn, "--db-poll", "50ms")
	hc := &http.Client{Timeout: 5 * time.Second}

	b := browsertest.Start(t, 1280, 900, 60*time.Second)
	b.Run(chromedp.Navigate(p.URL("/admin/")),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), ops),
		chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("rules")))
	b.Shot("01-rules")

	createRule(t, b, db)
	for i, want := range []bool{true, true, true, false} {
		require.Equal(t, want, checkAt(t, hc, p, "carol", "/api/search/1"), "check %d under the new rule of 3 an hour", i+1)
	}

	blockAndClear(t, b, db, hc, p)

	b.Run(chromedp.Navigate(p.URL("/admin/rules/search")),
		chromedp.WaitVisible(chromedp.ID("delete-link")),
		chromedp.Click(chromedp.ID("delete-link")),
		chromedp.WaitVisible(chromedp.ID("delete")))
	b.Shot("09-delete-confirm")
	b.Run(chromedp.Click(chromedp.ID("delete")), chromedp.WaitVisible(chromedp.ID("notice")))
	require.Contains(t, b.Text("#notice"), "Deleted rule search")
	b.Shot("10-rule-deleted")
	require.True(t, checkAt(t, hc, p, "carol", "/api/search/1"), "no rule limits carol once it is deleted")

	auditHasEveryChange(t, b, db, p)
	readTokenRefused(t, b, db, p, viewer)
}

// createRule creates the rule search (3 an hour on /api/search/**) on the
// new-rule page, first with a limit of 0, which is refused at its field
// with nothing stored.
func createRule(t *testing.T, b *browsertest.Browser, db *rulesdb.DB) {
	t.Helper()
	b.Run(chromedp.Click(chromedp.ID("new-rule")), chromedp.WaitVisible(chromedp.ID("new-rule-form")))
	b.Shot("02-new-rule")
	b.Run(chromedp.SendKeys(chromedp.ID("id"), "search"),
		chromedp.SendKeys(chromedp.ID("name"), "Search"),
		chromedp.SendKeys(chromedp.ID("endpoint_pattern"), "/api/search/**"),
		chromedp.SendKeys(chromedp.ID("limit"), "0"),
		chromedp.Clear(chromedp.ID("window_seconds")),
		chromedp.SendKeys(chromedp.ID("window_seconds"), "3600"),
		chromedp.SetValue(chromedp.ID("algorithm"), "fixed_window"),
		chromedp.Click(chromedp.ID("create")),
		chromedp.WaitVisible(chromedp.ID("err-limit")))
	require.Contains(t, b.Text("#err-limit"), "must be at least 1, got 0")
	require.Contains(t, b.Text("#error"), "Not created")
	b.Shot("03-new-rule-refused")
	_, err := db.Get(context.Background(), "search")
	require.ErrorIs(t, err, rulesdb.ErrNotFound, "nothing stored")

	b.Run(chromedp.Clear(chromedp.ID("limit")),
		chromedp.SendKeys(chromedp.ID("limit"), "3"),
		chromedp.Click(chromedp.ID("create")),
		chromedp.WaitVisible(chromedp.ID("notice")))
	require.Contains(t, b.Text("#notice"), "Created: version")
	require.Equal(t, "search", b.Text("#rule-id"))
	require.Equal(t, "none", b.Text("#lease"))
	b.Shot("04-rule-created")
	b.Run(chromedp.Click(chromedp.CSS(`header a[href="/admin/"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-rule="search"]`)))
	require.Equal(t, "3", b.Text(`tr[data-rule="search"] td:nth-child(6)`))
	b.Shot("05-rules-with-new")
}

// dbRevision is the database's revision: unchanged, nothing was written.
func dbRevision(t *testing.T, db *rulesdb.DB) int64 {
	t.Helper()
	rev, err := db.Revision(context.Background())
	require.NoError(t, err)
	return rev
}

// blockAndClear blocks mallory under the rule search on its caller page:
// mallory is denied from its first check, dave is not; clearing the block
// admits mallory again. A tier is assigned to mallory, then removed.
func blockAndClear(t *testing.T, b *browsertest.Browser, db *rulesdb.DB, hc *http.Client, p instance) {
	t.Helper()
	b.Run(chromedp.Navigate(p.URL("/admin/users?dimension=user&id=mallory")),
		chromedp.WaitVisible(chromedp.ID("override-form")))
	b.Shot("06-user")
	before := dbRevision(t, db)
	b.Run(chromedp.SetValue(chromedp.ID("rule_id"), "search"),
		chromedp.Click(chromedp.ID("kind-limit")),
		chromedp.Clear(chromedp.ID("ttl_seconds")),
		chromedp.SendKeys(chromedp.ID("ttl_seconds"), "9999999"),
		chromedp.Click(chromedp.ID("set-override")),
		chromedp.WaitVisible(chromedp.ID("err-limit")))
	require.Contains(t, b.Text("#err-limit"), "required")
	require.Contains(t, b.Text("#err-ttl_seconds"), "must be 1 to 2592000 (30 days), got 9999999")
	b.Shot("06b-user-override-refused")
	require.Equal(t, before, dbRevision(t, db), "nothing written")
	b.Run(chromedp.SetValue(chromedp.ID("rule_id"), "search"),
		chromedp.Click(chromedp.ID("kind-block")),
		chromedp.Clear(chromedp.ID("ttl_seconds")),
		chromedp.SendKeys(chromedp.ID("ttl_seconds"), "600"),
		chromedp.Click(chromedp.ID("set-override")),
		chromedp.WaitVisible(chromedp.ID("notice")))
	require.Contains(t, b.Text("#notice"), "Override set")
	require.Contains(t, b.Text(`#user-overrides tr[data-rule="search"]`), "blocked")
	b.Shot("07-user-blocked")
	require.False(t, checkAt(t, hc, p, "mallory", "/api/search/1"), "mallory is blocked from its first check")
	require.True(t, checkAt(t, hc, p, "dave", "/api/search/1"), "dave is not")

	b.Run(chromedp.Navigate(p.URL("/admin/overrides")), chromedp.WaitVisible(chromedp.ID("overrides")))
	b.Shot("08-overrides")
	b.Run(chromedp.Navigate(p.URL("/admin/users?dimension=user&id=mallory")),
		chromedp.WaitVisible(chromedp.CSS(`#user-overrides tr[data-rule="search"] button.clear`)),
		chromedp.Click(chromedp.CSS(`#user-overrides tr[data-rule="search"] button.clear`)),
		chromedp.WaitVisible(chromedp.ID("notice")))
	require.Contains(t, b.Text("#notice"), "Override cleared")
	require.Contains(t, b.Text("#user-overrides"), "None in force")
	b.Shot("08b-user-cleared")
	require.True(t, checkAt(t, hc, p, "mallory", "/api/search/1"), "mallory is admitted once the block is cleared")

	b.Run(chromedp.SendKeys(chromedp.ID("tier-name"), "gold"),
		chromedp.Click(chromedp.ID("set-tier")),
		chromedp.WaitVisible(chromedp.ID("remove-tier")))
	require.Contains(t, b.Text("#notice"), "Tier assigned")
	require.Equal(t, "gold", b.Text("#tier"))
	b.Shot("08c-user-tier")
	b.Run(chromedp.Click(chromedp.ID("remove-tier")), chromedp.WaitVisible(chromedp.ID("notice")))
	require.Contains(t, b.Text("#notice"), "Tier removed")
	require.Contains(t, b.Text("h2"), "no tier")
}

// auditHasEveryChange finds each change of the flow on the audit page,
// under the operator's token, and in the database with the request id of
// a page request.
func auditHasEveryChange(t *testing.T, b *browsertest.Browser, db *rulesdb.DB, p instance) {
	t.Helper()
	b.Run(chromedp.Navigate(p.URL("/admin/audit?actor=ops")), chromedp.WaitVisible(chromedp.ID("audit")))
	b.Shot("11-audit")
	rows, err := chromedp.Run(b.Ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#audit tbody tr")).map(r =>
		r.querySelector(".actor").textContent + " " + r.children[3].textContent + " " + r.querySelector(".target").textContent)`))
	require.NoError(t, err)
	require.Equal(t, []string{
		"ops rule.delete rule/search",
		"ops tier.clear tier/user/mallory",
		"ops tier.set tier/user/mallory",
		"ops override.clear override/user/mallory/search",
		"ops override.set override/user/mallory/search",
		"ops rule.create rule/search",
	}, rows, "newest first")
	log, _, err := db.AuditQuery(context.Background(), rulesdb.AuditFilter{Actor: "ops", Limit: 10})
	require.NoError(t, err)
	require.Len(t, log, 6)
	for _, e := range log {
		require.NotEmpty(t, e.RequestID, "%s: the page request's id", e.Action)
	}
}

// readTokenRefused signs in with a read token: the caller page shows no
// form, and a block form forced into the page (with the session's CSRF
// token) is refused with nothing written.
func readTokenRefused(t *testing.T, b *browsertest.Browser, db *rulesdb.DB, p instance, viewer string) {
	t.Helper()
	b.Run(chromedp.Click(chromedp.ID("logout")),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), viewer),
		chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("rules")),
		chromedp.Navigate(p.URL("/admin/users?dimension=user&id=mallory")),
		chromedp.WaitVisible(chromedp.ID("readonly")))
	forms, err := chromedp.Run(b.Ctx, chromedp.Evaluate[int](`document.querySelectorAll("#override-form, #tier-form, #new-rule, button.clear").length`))
	require.NoError(t, err)
	require.Zero(t, forms)
	b.Shot("12-read-only")
	before, err := db.Revision(context.Background())
	require.NoError(t, err)
	_, err = chromedp.Run(b.Ctx, chromedp.Evaluate[bool](`(() => {
		const f = document.createElement("form");
		f.method = "post";
		f.action = "/admin/users/override";
		const add = (n, v) => { const i = document.createElement("input"); i.name = n; i.value = v; f.appendChild(i); };
		add("csrf", document.querySelector("input[name=csrf]").value);
		add("dimension", "user"); add("id", "mallory"); add("rule_id", "orders"); add("kind", "block"); add("ttl_seconds", "600");
		document.body.appendChild(f);
		f.submit();
		return true;
	})()`))
	require.NoError(t, err)
	b.Run(chromedp.WaitVisible(chromedp.Search(`//h1[contains(., "Forbidden")]`)))
	require.Contains(t, b.Text("h1"), "read scope")
	b.Shot("13-read-refused")
	after, err := db.Revision(context.Background())
	require.NoError(t, err)
	require.Equal(t, before, after, "nothing written")
}
