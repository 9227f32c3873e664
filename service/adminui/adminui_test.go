package adminui

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rulesdb"
)

func TestNewRequiresItsParts(t *testing.T) {
	_, err := New(Options{})
	require.ErrorContains(t, err, "Options.DB")
}

func TestSignInSessionsAndSignOut(t *testing.T) {
	s := newStack(t)
	c := s.client()

	for _, p := range []string{"/admin/", "/admin/rules/orders", "/admin/users", "/admin/audit", "/admin/recent", "/admin/overrides", "/admin/nope"} {
		r := c.get(p)
		require.Equal(t, http.StatusSeeOther, r.status, p)
		require.Equal(t, "/admin/login", r.header.Get("Location"), p)
	}
	r := c.get("/admin/login")
	require.Equal(t, http.StatusOK, r.status)
	require.Contains(t, r.body, `name="token"`)

	r = c.post("/admin/login", url.Values{"token": {"slk_wrong"}})
	require.Equal(t, http.StatusUnauthorized, r.status)
	require.Contains(t, r.body, "That token is not valid")
	require.Empty(t, r.header.Values("Set-Cookie"))
	r = c.post("/admin/login", url.Values{"token": {""}})
	require.Equal(t, http.StatusBadRequest, r.status)

	r = c.post("/admin/login", url.Values{"token": {s.write}})
	require.Equal(t, http.StatusSeeOther, r.status)
	cookie := r.header.Get("Set-Cookie")
	require.Contains(t, cookie, cookieName+"=")
	require.Contains(t, cookie, "HttpOnly")
	require.Contains(t, cookie, "SameSite=Strict")
	require.Contains(t, cookie, "Path=/admin/")
	require.NotContains(t, cookie, "Secure", "not over plain HTTP")
	require.NotContains(t, cookie, s.write, "the token never goes into the cookie")

	r = c.get("/admin/")
	require.Equal(t, http.StatusOK, r.status)
	require.Contains(t, r.body, `<span id="who">alice</span>`)
	require.Contains(t, r.body, `data-rule="orders"`)
	require.Equal(t, http.StatusNotFound, c.get("/admin/nope").status)
	require.Equal(t, http.StatusSeeOther, c.get("/admin/login").status, "signed in: the form sends to the rules")

	// Sign-out needs the CSRF token; then the session is gone.
	require.Equal(t, http.StatusForbidden, c.post("/admin/logout", url.Values{}).status)
	r = c.post("/admin/logout", url.Values{"csrf": {csrf(t, c.get("/admin/").body)}})
	require.Equal(t, http.StatusSeeOther, r.status)
	require.Equal(t, 0, s.h.sess.len())
	require.Equal(t, http.StatusSeeOther, c.get("/admin/").status)
}

func TestRevokedTokenEndsItsSession(t *testing.T) {
	s := newStack(t)
	c := s.client()
	c.login(s.read)
	require.Equal(t, http.StatusOK, c.get("/admin/").status)
	require.NoError(t, s.db.RevokeToken(context.Background(), "setup", "bob"))
	r := c.get("/admin/")
	require.Equal(t, http.StatusSeeOther, r.status)
	require.Equal(t, "/admin/login", r.header.Get("Location"))
	require.Equal(t, 0, s.h.sess.len())
}

func TestSessionsExpireAndAreBounded(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	tb := newSessions(3)
	a := tb.create("a", now)
	require.Same(t, a, tb.get(a.id, now.Add(sessionIdle-time.Second)))
	require.Nil(t, tb.get(a.id, now.Add(2*sessionIdle)), "idle too long")
	require.Nil(t, tb.get("unknown", now))

	b := tb.create("b", now)
	for i := 1; i < 8*int(sessionLife/sessionIdle); i++ { // used often, but not forever
		at := now.Add(time.Duration(i) * sessionIdle / 2)
		if at.Sub(now) >= sessionLife {
			require.Nil(t, tb.get(b.id, at))
			break
		}
		require.NotNil(t, tb.get(b.id, at))
	}

	var ids []string
	for i := range 10 {
		ids = append(ids, tb.create("x", now.Add(time.Duration(i)*time.Second)).id)
		require.LessOrEqual(t, tb.len(), 3)
	}
	require.NotNil(t, tb.get(ids[9], now.Add(10*time.Second)))
	require.Nil(t, tb.get(ids[0], now.Add(10*time.Second)), "the least recently used went first")
	require.NotEqual(t, ids[8], ids[9])
	require.Len(t, ids[9], 43, "32 random bytes")
}

var styleRe = regexp.MustCompile(`(?s)<style>(.*)</style>`)

func TestSecurityHeadersOnEveryResponse(t *testing.T) {
	s := newStack(t)
	c := s.client()
	check := func(r resp, what string) {
		t.Helper()
		csp := r.header.Get("Content-Security-Policy")
		require.Contains(t, csp, "default-src 'none'", what)
		require.Contains(t, csp, "frame-ancestors 'none'", what)
		require.NotContains(t, csp, "script-src", what)
		require.Equal(t, "DENY", r.header.Get("X-Frame-Options"), what)
		require.Equal(t, "no-referrer", r.header.Get("Referrer-Policy"), what)
		require.Equal(t, "no-store", r.header.Get("Cache-Control"), what)
		require.Equal(t, "nosniff", r.header.Get("X-Content-Type-Options"), what)
		if m := styleRe.FindStringSubmatch(r.body); m != nil {
			sum := sha256.Sum256([]byte(m[1]))
			require.Contains(t, csp, "style-src 'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'", "the inline stylesheet is the one allowed: "+what)
		}
	}
	check(c.get("/admin/"), "redirect to sign-in")
	check(c.get("/admin/login"), "sign-in form")
	check(c.post("/admin/login", url.Values{"token": {"bad"}}), "refused sign-in")
	c.login(s.write)
	for _, p := range []string{"/admin/", "/admin/rules/orders", "/admin/rules/missing", "/admin/users?id=u1", "/admin/overrides", "/admin/audit", "/admin/recent", "/admin/x/y"} {
		r := c.get(p)
		require.Contains(t, r.body, "<style>", p)
		check(r, p)
	}
}

// TestEditRule edits a rule through the form as a browser without
// JavaScript would: the change is audited with the token's name and decides
// the next checks.
func TestEditRule(t *testing.T) {
	onEachDB(t, func(t *testing.T, s *stack) {
		ctx := context.Background()
		c := s.client()
		c.login(s.write)
		page := c.get("/admin/rules/orders")
		require.Equal(t, http.StatusOK, page.status)
		require.Contains(t, page.body, `id="save"`)
		form := ruleForm(t, page.body)
		form.Set("limit", "2")
		r := c.post("/admin/rules/orders", form)
		require.Equal(t, http.StatusSeeOther, r.status, r.body)
		require.Equal(t, "/admin/rules/orders?saved=1", r.header.Get("Location"))
		require.Contains(t, c.get("/admin/rules/orders?saved=1").body, "Saved")

		stored, err := s.db.Get(ctx, "orders")
		require.NoError(t, err)
		require.EqualValues(t, 2, stored.Limit)
		audit, _, err := s.db.AuditQuery(ctx, rulesdb.AuditFilter{Target: "rule/orders", Newest: true, Limit: 1})
		require.NoError(t, err)
		require.Equal(t, "alice", audit[0].Actor)
		require.Equal(t, "rule.update", audit[0].Action)
		require.Len(t, r.header.Get("X-Request-Id"), 32)
		all, err := s.db.Audit(ctx, 0, 1000)
		require.NoError(t, err)
		require.Equal(t, r.header.Get("X-Request-Id"), all[len(all)-1].RequestID, "the audit row carries the save's request id")

		waitRevision(t, s, stored.Revision)
		for i, want := range []bool{true, true, false} {
			res, err := s.eng.Check(ctx, engine.Check{Dimension: "user", Identifier: "u1", Endpoint: "/api/orders/7", Cost: 1})
			require.NoError(t, err)
			require.Equal(t, want, res.Allowed, "check %d under the limit of 2", i+1)
		}
	})
}

func waitRevision(t *testing.T, s *stack, rev int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		n, err := strconv.ParseInt(s.eng.Snapshot().Revision(), 10, 64)
		return err == nil && n >= rev
	}, 5*time.Second, 10*time.Millisecond, "the engine reaches revision %d", rev)
}

func TestSessionCookieIsSecureOverTLS(t *testing.T) {
	s := newStack(t)
	srv := httptest.NewTLSServer(s.h)
	defer srv.Close()
	c := srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.PostForm(srv.URL+"/admin/login", url.Values{"token": {s.write}})
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	cookie := resp.Header.Get("Set-Cookie")
	require.Contains(t, cookie, "; Secure")
	require.Contains(t, cookie, "HttpOnly")
	require.Contains(t, cookie, "SameSite=Strict")
}
