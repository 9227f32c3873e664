package adminui

import (
	"context"
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/adminapi"
	"github.com/sluicehq/sluice/service/adminauth"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// apiCall sends body to an admin API over the stack's database (the API
// ratelimitd serves, behind adminauth) with the write token, and returns
// the status and body.
func (s *stack) apiCall(method, path, ifMatch, body string) (int, string) {
	s.t.Helper()
	store, err := memorystore.New()
	require.NoError(s.t, err)
	auth, err := adminauth.New(s.db, store, adminauth.Options{CacheTTL: -1})
	require.NoError(s.t, err)
	h, err := adminapi.New(adminapi.Options{DB: s.db, Engine: s.eng, Auth: auth})
	require.NoError(s.t, err)
	r, err := http.NewRequest(method, adminapi.Prefix+path, strings.NewReader(body))
	require.NoError(s.t, err)
	r.Header.Set("Authorization", "Bearer "+s.write)
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	if ifMatch != "" {
		r.Header.Set("If-Match", ifMatch)
	}
	w := &apiWriter{header: http.Header{}}
	h.ServeHTTP(w, r)
	return w.status, w.body.String()
}

// lastAudit returns the newest audit row.
func (s *stack) lastAudit() rulesdb.AuditEntry {
	s.t.Helper()
	log, _, err := s.db.AuditQuery(context.Background(), rulesdb.AuditFilter{Newest: true, Limit: 1})
	require.NoError(s.t, err)
	require.Len(s.t, log, 1)
	return log[0]
}

// normalized is an audit row's before or after without what differs
// between two equal changes (versions, times), the twin's names replaced.
func normalized(t *testing.T, raw json.RawMessage, twins *strings.Replacer) map[string]any {
	t.Helper()
	if len(raw) == 0 {
		return nil
	}
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(twins.Replace(string(raw))), &m))
	for _, k := range []string{"etag", "revision", "created_at", "updated_at", "expires_at"} {
		delete(m, k)
	}
	return m
}

// Every change made on the page is the admin API's: the same change made
// through the API on a twin (another rule, another caller) writes an audit
// row of the same action, actor, target and before and after; the page's
// row carries the request id its answer did, and exactly one row is
// written per form.
func TestPageChangesAreAuditedAsTheAPIs(t *testing.T) {
	onEachDB(t, func(t *testing.T, s *stack) {
		c := s.client()
		c.login(s.write)
		page := c.get("/admin/rules/orders").body
		tok := csrf(t, page)
		twins := strings.NewReplacer("a-rule", "p-rule", "/a/", "/p/", "a-user", "p-user")
		etag := func(id string) string {
			rl, err := s.db.Get(context.Background(), id)
			require.NoError(t, err)
			return rl.ETag
		}
		steps := []struct {
			name         string
			path         string
			form         func() url.Values
			method, api  string
			ifMatch      func() string
			body, action string
		}{
			{"create", "/admin/new-rule", func() url.Values {
				return url.Values{"id": {"p-rule"}, "name": {"P"}, "dimension": {"user"}, "endpoint_pattern": {"/p/**"}, "tier": {""},
					"limit": {"3"}, "window_seconds": {"60"}, "algorithm": {"token_bucket"}, "burst": {"4"}, "lease_seconds": {"0"}, "enabled": {"on"}}
			}, http.MethodPost, "/rules", nil, `{"id":"a-rule","name":"P","dimension":"user","endpoint_pattern":"/a/**","tier":"","limit":3,"window_seconds":60,"algorithm":"token_bucket","burst":4,"shadow":false,"enabled":true}`, "rule.create"},
			{"edit", "/admin/rules/p-rule", func() url.Values {
				return url.Values{"etag": {etag("p-rule")}, "name": {"P2"}, "dimension": {"user"}, "endpoint_pattern": {"/p/**"}, "tier": {""},
					"limit": {"5"}, "window_seconds": {"60"}, "algorithm": {"token_bucket"}, "burst": {"0"}, "lease_seconds": {"0.25"}, "shadow": {"on"}, "enabled": {"on"}}
			}, http.MethodPut, "/rules/a-rule", func() string { return etag("a-rule") }, `{"name":"P2","dimension":"user","endpoint_pattern":"/a/**","tier":"","limit":5,"window_seconds":60,"algorithm":"token_bucket","burst":0,"lease_seconds":0.25,"shadow":true,"enabled":true}`, "rule.update"},
			{"tier", "/admin/users/tier", func() url.Values {
				return url.Values{"dimension": {"user"}, "id": {"p-user"}, "tier": {"gold"}}
			}, http.MethodPut, "/users/a-user/tier?dimension=user", nil, `{"tier":"gold"}`, "tier.set"},
			{"block", "/admin/users/override", func() url.Values {
				return url.Values{"dimension": {"user"}, "id": {"p-user"}, "rule_id": {"p-rule"}, "kind": {"block"}, "ttl_seconds": {"600"}}
			}, http.MethodPost, "/users/a-user/override?dimension=user", nil, `{"rule_id":"a-rule","block":true,"ttl_seconds":600}`, "override.set"},
			{"limit override", "/admin/users/override", func() url.Values {
				return url.Values{"dimension": {"user"}, "id": {"p-user"}, "rule_id": {"p-rule"}, "kind": {"limit"}, "limit": {"9"}, "window_seconds": {"30"}, "ttl_seconds": {"600"}}
			}, http.MethodPost, "/users/a-user/override?dimension=user", nil, `{"rule_id":"a-rule","limit":9,"window_seconds":30,"ttl_seconds":600}`, "override.set"},
			{"clear", "/admin/users/override/clear", func() url.Values {
				return url.Values{"dimension": {"user"}, "id": {"p-user"}, "rule_id": {"p-rule"}}
			}, http.MethodDelete, "/users/a-user/override/a-rule?dimension=user", nil, ``, "override.clear"},
			{"untier", "/admin/users/tier", func() url.Values {
				return url.Values{"dimension": {"user"}, "id": {"p-user"}, "tier": {"gold"}, "remove": {"1"}}
			}, http.MethodPut, "/users/a-user/tier?dimension=user", nil, `{"tier":""}`, "tier.clear"},
			{"delete", "/admin/rules/p-rule/delete", func() url.Values {
				return url.Values{"etag": {etag("p-rule")}}
			}, http.MethodDelete, "/rules/a-rule", func() string { return etag("a-rule") }, ``, "rule.delete"},
		}
		for _, st := range steps {
			im := ""
			if st.ifMatch != nil {
				im = st.ifMatch()
			}
			status, body := s.apiCall(st.method, st.api, im, st.body)
			require.Less(t, status, 300, "%s through the API: %s", st.name, body)
			viaAPI := s.lastAudit()

			before := s.revision()
			f := st.form()
			f.Set("csrf", tok)
			r := c.post(st.path, f)
			require.Equal(t, http.StatusSeeOther, r.status, "%s on the page: %s", st.name, r.body)
			require.Equal(t, before+1, s.revision(), "%s: one change", st.name)
			viaPage := s.lastAudit()
			require.Equal(t, st.action, viaPage.Action, st.name)
			require.Equal(t, viaAPI.Action, viaPage.Action, st.name)
			require.Equal(t, "alice", viaPage.Actor, st.name)
			require.Equal(t, viaAPI.Actor, viaPage.Actor, st.name)
			require.Equal(t, twins.Replace(viaAPI.Target), viaPage.Target, st.name)
			require.Equal(t, r.header.Get("X-Request-Id"), viaPage.RequestID, "%s: the page request's id", st.name)
			require.Equal(t, normalized(t, viaAPI.Before, twins), normalized(t, viaPage.Before, twins), "%s: before", st.name)
			require.Equal(t, normalized(t, viaAPI.After, twins), normalized(t, viaPage.After, twins), "%s: after", st.name)
		}
	})
}

// formCase is one refused form: the field set to value, the message the
// field shows, and (when api is set) the admin API's body of the same
// change, whose refusal must name the same field with the same message.
type formCase struct {
	field, value, want string
	api                map[string]any
}

var errSpan = regexp.MustCompile(`<span class="err" id="err-([a-z_]+)">([^<]*)</span>`)

// inlineErrors returns the field errors a page shows.
func inlineErrors(body string) map[string]string {
	out := map[string]string{}
	for _, m := range errSpan.FindAllStringSubmatch(body, -1) {
		out[m[1]] = html.UnescapeString(m[2])
	}
	return out
}

// apiErrors returns the fields at fault of an API refusal.
func apiErrors(t *testing.T, status int, body string) map[string]string {
	t.Helper()
	require.GreaterOrEqual(t, status, 400, body)
	var p struct {
		Errors []struct{ Field, Message string } `json:"errors"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &p), body)
	out := map[string]string{}
	for _, e := range p.Errors {
		out[e.Field] = e.Message
	}
	return out
}

// Each form is checked as the admin API checks the same change: a refused
// form shows, next to each field, the message the API gives for it (the
// same core.FieldError), and writes nothing.
func TestFormsAreRefusedAsTheAPIRefuses(t *testing.T) {
	onEachDB(t, func(t *testing.T, s *stack) {
		c := s.client()
		c.login(s.write)
		page := c.get("/admin/rules/orders").body
		tok := csrf(t, page)
		newRule := url.Values{"id": {"n1"}, "name": {"N"}, "dimension": {"user"}, "endpoint_pattern": {"/n/**"}, "tier": {""},
			"limit": {"5"}, "window_seconds": {"60"}, "algorithm": {"gcra"}, "burst": {"0"}, "lease_seconds": {"0"}, "enabled": {"on"}}
		newJSON := map[string]any{"id": "n1", "name": "N", "dimension": "user", "endpoint_pattern": "/n/**", "tier": "",
			"limit": 5, "window_seconds": 60, "algorithm": "gcra", "burst": 0, "lease_seconds": 0, "enabled": true, "shadow": false}
		override := url.Values{"dimension": {"user"}, "id": {"u1"}, "rule_id": {"orders"}, "kind": {"limit"}, "limit": {"3"}, "window_seconds": {"60"}, "ttl_seconds": {"600"}}
		noTTL := url.Values{"dimension": {"user"}, "id": {"u1"}, "rule_id": {"orders"}, "kind": {"limit"}, "limit": {"3"}, "window_seconds": {"60"}}
		overrideJSON := map[string]any{"rule_id": "orders", "limit": 3, "window_seconds": 60, "ttl_seconds": 600}
		patch := func(base map[string]any, kv ...any) map[string]any {
			out := map[string]any{}
			for k, v := range base {
				out[k] = v
			}
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i+1] == nil {
					delete(out, kv[i].(string))
				} else {
					out[kv[i].(string)] = kv[i+1]
				}
			}
			return out
		}
		cases := []struct {
			path, apiPath string
			base          url.Values
			formCase
		}{
			{"/admin/new-rule", "/rules", newRule, formCase{"id", "", "required", patch(newJSON, "id", nil)}},
			{"/admin/new-rule", "/rules", newRule, formCase{"id", "no spaces", "", patch(newJSON, "id", "no spaces")}},
			{"/admin/new-rule", "/rules", newRule, formCase{"id", "orders", "a rule with this id exists", patch(newJSON, "id", "orders")}},
			{"/admin/new-rule", "/rules", newRule, formCase{"limit", "0", "must be at least 1, got 0", patch(newJSON, "limit", 0)}},
			{"/admin/new-rule", "/rules", newRule, formCase{"limit", "", "required", patch(newJSON, "limit", nil)}},
			{"/admin/new-rule", "/rules", newRule, formCase{"limit", "lots", notNumber, nil}},
			{"/admin/new-rule", "/rules", newRule, formCase{"dimension", "", "required", patch(newJSON, "dimension", nil)}},
			{"/admin/new-rule", "/rules", newRule, formCase{"name", "tab\there", "control characters", patch(newJSON, "name", "tab\there")}},
			{"/admin/new-rule", "/rules", newRule, formCase{"endpoint_pattern", "nope", "", patch(newJSON, "endpoint_pattern", "nope")}},
			{"/admin/new-rule", "/rules", newRule, formCase{"tier", "gold", "", patch(newJSON, "tier", "gold")}},
			{"/admin/new-rule", "/rules", newRule, formCase{"lease_seconds", "-2", "", patch(newJSON, "lease_seconds", -2)}},
			{"/admin/new-rule", "/rules", newRule, formCase{"burst", "-1", "", patch(newJSON, "burst", -1)}},
			{"/admin/new-rule", "/rules", newRule, formCase{"window_seconds", "99999999999", "", patch(newJSON, "window_seconds", 99999999999)}},
			{"/admin/users/override", "/users/u1/override?dimension=user", override, formCase{"limit", "", "required", patch(overrideJSON, "limit", nil)}},
			{"/admin/users/override", "/users/u1/override?dimension=user", override, formCase{"limit", "0", "", patch(overrideJSON, "limit", 0)}},
			{"/admin/users/override", "/users/u1/override?dimension=user", override, formCase{"window_seconds", "0", "", patch(overrideJSON, "window_seconds", 0)}},
			{"/admin/users/override", "/users/u1/override?dimension=user", override, formCase{"ttl_seconds", "0", "", patch(overrideJSON, "ttl_seconds", 0)}},
			{"/admin/users/override", "/users/u1/override?dimension=user", override, formCase{"ttl_seconds", "2592001", "30 days", patch(overrideJSON, "ttl_seconds", 2592001)}},
			{"/admin/users/override", "/users/u1/override?dimension=user", noTTL, formCase{"expires_at", "", "required", patch(overrideJSON, "ttl_seconds", nil)}},
			{"/admin/users/override", "/users/u1/override?dimension=user", noTTL, formCase{"expires_at", "2020-01-01T00:00:00Z", "in the future", patch(overrideJSON, "ttl_seconds", nil, "expires_at", "2020-01-01T00:00:00Z")}},
			{"/admin/users/override", "/users/u1/override?dimension=user", noTTL, formCase{"expires_at", "tomorrow", "RFC 3339", patch(overrideJSON, "ttl_seconds", nil, "expires_at", "tomorrow")}},
			{"/admin/users/override", "/users/u1/override?dimension=user", noTTL, formCase{"expires_at", "2099-01-01 00:00", "at most 30 days ahead, got 2099-01-01T00:00:00Z", patch(overrideJSON, "ttl_seconds", nil, "expires_at", "2099-01-01T00:00:00Z")}},
			{"/admin/users/override", "/users/u1/override?dimension=user", override, formCase{"rule_id", "nope", "no rule", patch(overrideJSON, "rule_id", "nope")}},
			{"/admin/users/override", "/users/u1/override?dimension=user", override, formCase{"rule_id", "", "", patch(overrideJSON, "rule_id", "")}},
			{"/admin/users/override", "/users/u1/override?dimension=user", override, formCase{"kind", "maybe", "choose block or limit", nil}},
			{"/admin/users/override", "/users/u1/override?dimension=user", override, formCase{"ttl_seconds", "soon", notNumber, nil}},
			{"/admin/users/tier", "/users/u1/tier?dimension=user", url.Values{"dimension": {"user"}, "id": {"u1"}}, formCase{"tier", strings.Repeat("t", 65), "longer than 64 bytes", map[string]any{"tier": strings.Repeat("t", 65)}}},
			{"/admin/users/tier", "/users/u1/tier?dimension=user", url.Values{"dimension": {"user"}, "id": {"u1"}}, formCase{"tier", "a\x7fb", "control characters", map[string]any{"tier": "a\x7fb"}}},
		}
		before := s.revision()
		for _, tc := range cases {
			f := url.Values{"csrf": {tok}}
			for k, v := range tc.base {
				f[k] = v
			}
			f.Set(tc.field, tc.value)
			r := c.post(tc.path, f)
			require.Equal(t, http.StatusBadRequest, r.status, "%s %s=%q: %s", tc.path, tc.field, tc.value, r.body)
			shown := inlineErrors(r.body)
			require.Contains(t, shown, tc.field, "%s %s=%q: the error is next to its field", tc.path, tc.field, tc.value)
			require.Contains(t, shown[tc.field], tc.want, "%s %s=%q", tc.path, tc.field, tc.value)
			require.Contains(t, r.body, `id="error"`)
			if tc.api != nil {
				b, err := json.Marshal(tc.api)
				require.NoError(t, err)
				method := http.MethodPost
				if strings.HasSuffix(tc.apiPath, "/tier?dimension=user") {
					method = http.MethodPut
				}
				status, body := s.apiCall(method, tc.apiPath, "", string(b))
				require.Equal(t, apiErrors(t, status, body)[tc.field], shown[tc.field], "%s %s=%q: the API's message", tc.path, tc.field, tc.value)
			}
			require.Equal(t, before, s.revision(), "%s %s=%q: nothing written", tc.path, tc.field, tc.value)
		}
	})
}

// postRoutes are the page's POST routes that change something (every one
// but signing in and out), from its table, with a path to post to.
func postRoutes(t *testing.T, s *stack) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range s.h.table() {
		method, path, _ := strings.Cut(p.pattern, " ")
		if method != http.MethodPost || path == "/admin/login" || path == "/admin/logout" {
			continue
		}
		out[p.pattern] = strings.ReplaceAll(path, "{id}", "orders")
	}
	require.Len(t, out, 6, "the page's forms: edit, create, delete, tier, override, clear")
	return out
}

// A read-scope session sees every form's page but no form to change
// anything, and each form it posts anyway (a valid one, with its CSRF
// token) is refused with nothing written.
func TestReadTokenChangesNothing(t *testing.T) {
	onEachDB(t, func(t *testing.T, s *stack) {
		ctx := context.Background()
		_, err := s.db.SetOverride(ctx, "setup", rulesdb.Override{Dimension: "user", Identifier: "u1", RuleID: "orders", Block: true, ExpiresAt: time.Now().Add(time.Hour)})
		require.NoError(t, err)
		_, err = s.db.SetTier(ctx, "setup", "user", "u1", "gold")
		require.NoError(t, err)
		waitRevision(t, s, s.revision())
		c := s.client()
		c.login(s.read)
		for _, p := range []string{"/admin/", "/admin/new-rule", "/admin/rules/orders", "/admin/rules/orders/delete", "/admin/users?dimension=user&id=u1", "/admin/overrides"} {
			r := c.get(p)
			require.Equal(t, http.StatusOK, r.status, p)
			require.NotContains(t, r.body, `<button type="submit" id="`+"save", p)
			for _, b := range []string{`id="create"`, `id="delete"`, `id="delete-link"`, `id="new-rule"`, `id="set-tier"`, `id="remove-tier"`, `id="set-override"`, `class="clear`} {
				require.NotContains(t, r.body, b, "%s shows a read session %s", p, b)
			}
		}
		require.Contains(t, c.get("/admin/users?dimension=user&id=u1").body, `id="readonly"`)
		page := c.get("/admin/rules/orders").body
		forms := validForms(t, s, page)
		before := s.revision()
		for pattern, path := range postRoutes(t, s) {
			r := c.post(path, forms[pattern])
			require.Equal(t, http.StatusForbidden, r.status, pattern)
			require.Contains(t, r.body, "read scope", pattern)
		}
		require.Equal(t, before, s.revision(), "nothing written")
	})
}

// Every form needs the session's CSRF token and must come from the page's
// own origin: a form without the token, with another session's, or posted
// from another site is refused, with nothing written.
func TestEveryFormIsCSRFProtected(t *testing.T) {
	s := newStack(t)
	c, other := s.client(), s.client()
	c.login(s.write)
	other.login(s.write)
	forms := validForms(t, s, c.get("/admin/rules/orders").body)
	otherCSRF := csrf(t, other.get("/admin/").body)
	before := s.revision()
	for pattern, path := range postRoutes(t, s) {
		f := url.Values{}
		for k, v := range forms[pattern] {
			f[k] = v
		}
		f.Del("csrf")
		require.Equal(t, http.StatusForbidden, c.post(path, f).status, "%s without the token", pattern)
		f.Set("csrf", otherCSRF)
		require.Equal(t, http.StatusForbidden, c.post(path, f).status, "%s with another session's token", pattern)
		for _, hdr := range [][]string{{"Sec-Fetch-Site", "cross-site"}, {"Sec-Fetch-Site", "same-site"}, {"Origin", "https://evil.example"}} {
			r := c.do(http.MethodPost, path, forms[pattern], hdr...)
			require.Equal(t, http.StatusForbidden, r.status, "%s with %v", pattern, hdr)
		}
	}
	require.Equal(t, before, s.revision(), "nothing written")
}

// A rule created on the page decides the checks sent once the page has
// answered; a block set there denies the caller at once, and clearing it
// admits the caller again; deleting the rule ends its limit and its
// overrides.
func TestPageChangesDecideAtOnce(t *testing.T) {
	onEachDB(t, func(t *testing.T, s *stack) {
		ctx := context.Background()
		c := s.client()
		c.login(s.write)
		tok := csrf(t, c.get("/admin/").body)
		check := func(id string) bool {
			res, err := s.eng.Check(ctx, engine.Check{Dimension: "ip", Identifier: id, Endpoint: "/p/1", Cost: 1})
			require.NoError(t, err)
			return res.Allowed
		}
		r := c.post("/admin/new-rule", url.Values{"csrf": {tok}, "id": {"p"}, "name": {"P"}, "dimension": {"ip"}, "endpoint_pattern": {"/p/**"},
			"limit": {"2"}, "window_seconds": {"3600"}, "algorithm": {"fixed_window"}, "burst": {"0"}, "lease_seconds": {"0"}, "enabled": {"on"}})
		require.Equal(t, http.StatusSeeOther, r.status, r.body)
		require.Equal(t, "/admin/rules/p?saved=created", r.header.Get("Location"))
		for i, want := range []bool{true, true, false} {
			require.Equal(t, want, check("10.0.0.1"), "check %d under the new rule of 2", i+1)
		}
		require.Contains(t, c.get(r.header.Get("Location")).body, "Created: version")

		block := url.Values{"csrf": {tok}, "dimension": {"ip"}, "id": {"10.0.0.2"}, "rule_id": {"p"}, "kind": {"block"}, "ttl_seconds": {"600"}}
		r = c.post("/admin/users/override", block)
		require.Equal(t, http.StatusSeeOther, r.status, r.body)
		require.False(t, check("10.0.0.2"), "blocked at once")
		u := c.get(r.header.Get("Location")).body
		require.Contains(t, u, "Override set")
		require.Regexp(t, `(?s)id="user-overrides".*<td class="mono">p</td><td>blocked</td>`, u)
		require.Contains(t, c.get("/admin/overrides").body, `name="rule_id" value="p"`, "a clear button on the overrides page")

		r = c.post("/admin/users/override/clear", url.Values{"csrf": {tok}, "dimension": {"ip"}, "id": {"10.0.0.2"}, "rule_id": {"p"}, "back": {"overrides"}})
		require.Equal(t, http.StatusSeeOther, r.status, r.body)
		require.Equal(t, "/admin/overrides?done=cleared", r.header.Get("Location"))
		require.True(t, check("10.0.0.2"), "admitted once the block is cleared")
		r = c.post("/admin/users/override/clear", url.Values{"csrf": {tok}, "dimension": {"ip"}, "id": {"10.0.0.2"}, "rule_id": {"p"}})
		require.Equal(t, http.StatusNotFound, r.status, "cleared already")

		require.Equal(t, http.StatusSeeOther, c.post("/admin/users/override", block).status)
		confirm := c.get("/admin/rules/p/delete")
		require.Equal(t, http.StatusOK, confirm.status)
		require.Contains(t, confirm.body, `id="delete-overrides"`, "the overrides that go with the rule")
		etag := html.UnescapeString(etagRe.FindStringSubmatch(confirm.body)[1])
		stale := `"1"`
		before := s.revision()
		r = c.post("/admin/rules/p/delete", url.Values{"csrf": {tok}, "etag": {stale}})
		require.Equal(t, http.StatusConflict, r.status, "a stale confirmation deletes nothing")
		require.Contains(t, r.body, "changed by someone else")
		require.Equal(t, before, s.revision())
		r = c.post("/admin/rules/p/delete", url.Values{"csrf": {tok}, "etag": {"*"}})
		require.Equal(t, http.StatusBadRequest, r.status, "only the version shown, never any")
		require.Equal(t, before, s.revision())
		r = c.post("/admin/rules/p/delete", url.Values{"csrf": {tok}, "etag": {etag}})
		require.Equal(t, http.StatusSeeOther, r.status, r.body)
		require.Contains(t, c.get(r.header.Get("Location")).body, "Deleted rule p and any overrides of it.")
		require.True(t, check("10.0.0.1"), "no rule limits the caller")
		require.True(t, check("10.0.0.2"), "nor blocks it")
		_, err := s.db.Get(ctx, "p")
		require.ErrorIs(t, err, rulesdb.ErrNotFound)
		require.NotContains(t, c.get("/admin/?deleted=orders").body, "Deleted rule", "no notice for a rule that is stored")
	})
}

// While the database fails (the token still authenticated from the cache),
// every form is answered 503 saying which step failed, with no error text
// and no panic.
func TestFormsWhenTheDatabaseFails(t *testing.T) {
	s := newStackWith(t, adminauth.Options{CacheTTL: time.Hour})
	c := s.client()
	c.login(s.write)
	forms := validForms(t, s, c.get("/admin/rules/orders").body)
	routes := postRoutes(t, s)
	require.NoError(t, s.db.Close())
	for pattern, path := range routes {
		r := c.post(path, forms[pattern])
		require.Equal(t, http.StatusServiceUnavailable, r.status, "%s: %s", pattern, r.body)
		require.Contains(t, r.body, "Service unavailable: ", pattern)
		require.Contains(t, r.body, "failed; try again shortly", pattern)
		require.NotContains(t, strings.ToLower(r.body), "sql", pattern)
		require.NotContains(t, r.body, "closed", pattern)
	}
}

// A caller's form naming no caller, or one the admin API's paths cannot
// name (. and .., resolved away as path segments), is refused naming the
// id, with nothing written; any other identifier, slashes and dots and
// escapes included, reaches the API as itself.
func TestCallerFormsNameTheirCaller(t *testing.T) {
	s := newStack(t)
	c := s.client()
	c.login(s.write)
	forms := validForms(t, s, c.get("/admin/rules/orders").body)
	before := s.revision()
	for _, pattern := range []string{"POST /admin/users/tier", "POST /admin/users/override", "POST /admin/users/override/clear"} {
		for _, id := range []string{"", ".", ".."} {
			f := url.Values{}
			for k, v := range forms[pattern] {
				f[k] = v
			}
			f.Set("id", id)
			r := c.post(strings.TrimPrefix(pattern, "POST "), f)
			require.Equal(t, http.StatusBadRequest, r.status, "%s id=%q", pattern, id)
			require.Contains(t, r.body, "Bad request: id: ", "%s id=%q", pattern, id)
		}
	}
	require.Equal(t, before, s.revision(), "nothing written")
	for _, id := range []string{"a/../b", "../x", "x/.", "a?b#c", "%2e%2e", "a b"} {
		f := url.Values{"csrf": forms["POST /admin/users/tier"]["csrf"], "dimension": {"user"}, "id": {id}, "tier": {"gold"}}
		r := c.post("/admin/users/tier", f)
		require.Equal(t, http.StatusSeeOther, r.status, "id=%q: %s", id, r.body)
		require.Equal(t, "gold", s.eng.Snapshot().TierOf("user", id), "id=%q: the tier of that very caller", id)
	}
}

// The rules page and a rule's page show the rule's lease (none, or its
// seconds), and the edit form carries it, so a save keeps it.
func TestRulePagesShowTheLease(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	_, err := s.db.Create(ctx, "setup", rulesdb.Rule{ID: "leased", Name: "L", Dimension: "api_key", Limit: 1000, WindowSeconds: 3600,
		Algorithm: "token_bucket", LeaseSeconds: 0.25, Enabled: true})
	require.NoError(t, err)
	c := s.client()
	c.login(s.read)
	list := c.get("/admin/").body
	require.Regexp(t, `(?s)<tr data-rule="leased">.*?<td class="num lease">0.25 s</td>`, list)
	require.Regexp(t, `(?s)<tr data-rule="orders">.*?<td class="num lease">none</td>`, list)
	page := c.get("/admin/rules/leased").body
	require.Contains(t, page, `<span id="lease">0.25 s</span>`)
	require.Contains(t, page, `id="lease_seconds" name="lease_seconds" value="0.25"`)
}
