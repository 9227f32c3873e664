package adminui

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/adminauth"
)

// revision returns the database revision: it moves with every write, so an
// unchanged revision proves nothing was written.
func (s *stack) revision() int64 {
	s.t.Helper()
	rev, err := s.db.Revision(context.Background())
	require.NoError(s.t, err)
	return rev
}

func TestStaleEditIsRefusedNotLost(t *testing.T) {
	onEachDB(t, func(t *testing.T, s *stack) {
		a, b := s.client(), s.client()
		a.login(s.write)
		b.login(s.write)
		formA := ruleForm(t, a.get("/admin/rules/orders").body)
		formB := ruleForm(t, b.get("/admin/rules/orders").body)

		formA.Set("limit", "5")
		require.Equal(t, http.StatusSeeOther, a.post("/admin/rules/orders", formA).status)
		before := s.revision()

		formB.Set("limit", "50")
		formB.Set("window_seconds", "30")
		r := b.post("/admin/rules/orders", formB)
		require.Equal(t, http.StatusConflict, r.status)
		require.Contains(t, r.body, `id="stale"`)
		require.Contains(t, r.body, "changed by someone else")
		require.Contains(t, r.body, "limit: <span class=\"mono\">50</span>", "the refused edit is shown for reference")
		require.Contains(t, r.body, `id="limit" name="limit" value="5"`, "the form shows the rule as it is now")
		require.Equal(t, before, s.revision(), "nothing written")
		got, err := s.db.Get(context.Background(), "orders")
		require.NoError(t, err)
		require.EqualValues(t, 5, got.Limit)
		require.EqualValues(t, 60, got.WindowSeconds)

		// The form now carries the current version: saving it again works.
		formB2 := ruleForm(t, r.body)
		formB2.Set("limit", "50")
		require.Equal(t, http.StatusSeeOther, b.post("/admin/rules/orders", formB2).status)
	})
}

func TestInvalidEditShowsTheFieldAndChangesNothing(t *testing.T) {
	onEachDB(t, func(t *testing.T, s *stack) {
		c := s.client()
		c.login(s.write)
		base := ruleForm(t, c.get("/admin/rules/orders").body)
		before := s.revision()
		for _, tc := range []struct {
			field, value, want string
		}{
			{"limit", "ten", "must be a whole number"},
			{"limit", "0", "must be at least 1, got 0"},
			{"limit", "-3", "must be at least 1, got -3"},
			{"window_seconds", "0", "must be 1 to 3153600000 \\(100 years\\), got 0"},
			{"name", "a\x01b", "must not contain control characters"}, // the admin API's check of a name
			{"lease_seconds", "-1", "must be 0 \\(none\\) to 3153600000 seconds, got -1"},
			{"lease_seconds", "soon", "must be a number of seconds"},
			{"dimension", "", "required"},
			{"window_seconds", "1.5", "must be a whole number"},
			{"burst", "5", "has no burst"}, // fixed_window has no burst
			{"burst", "x", "must be a whole number"},
			{"algorithm", "fastest", "is not one of token_bucket"},
			{"endpoint_pattern", "no-slash[", "must start with /"},
			{"tier", "gold", "no enabled rule without a tier"}, // a tier row needs its base rule
			{"limit", "99999999999999999999", "must be a whole number"},
		} {
			f := url.Values{}
			for k, v := range base {
				f[k] = v
			}
			f.Set(tc.field, tc.value)
			r := c.post("/admin/rules/orders", f)
			require.Equal(t, http.StatusBadRequest, r.status, "%s=%q", tc.field, tc.value)
			require.Regexp(t, `<span class="err" id="err-`+tc.field+`">[^<]*`+tc.want, r.body, "%s=%q: the error is next to its field", tc.field, tc.value)
			require.Contains(t, r.body, `id="error"`)
			require.Equal(t, before, s.revision(), "%s=%q: nothing written", tc.field, tc.value)
		}
	})
}

func TestReadScopeViewsButCannotSave(t *testing.T) {
	onEachDB(t, func(t *testing.T, s *stack) {
		c := s.client()
		c.login(s.read)
		page := c.get("/admin/rules/orders")
		require.Equal(t, http.StatusOK, page.status)
		require.Contains(t, page.body, `id="readonly"`)
		require.NotContains(t, page.body, `id="save"`)
		require.Contains(t, page.body, `id="limit" name="limit" value="10" disabled`)
		require.Contains(t, c.get("/admin/").body, ">view</a>")

		before := s.revision()
		f := ruleForm(t, page.body)
		f.Set("limit", "1")
		r := c.post("/admin/rules/orders", f)
		require.Equal(t, http.StatusForbidden, r.status)
		require.Contains(t, r.body, "read scope")
		require.Equal(t, before, s.revision())
	})
}

func TestForgedPostsAreRefused(t *testing.T) {
	s := newStack(t)
	c := s.client()
	c.login(s.write)
	f := ruleForm(t, c.get("/admin/rules/orders").body)
	f.Set("limit", "1")
	before := s.revision()

	noCSRF := url.Values{}
	for k, v := range f {
		noCSRF[k] = v
	}
	noCSRF.Del("csrf")
	require.Equal(t, http.StatusForbidden, c.post("/admin/rules/orders", noCSRF).status)
	// A token differing in its first character (never equal to the real one).
	wrong := []byte(f.Get("csrf"))
	wrong[0] = map[bool]byte{true: 'B', false: 'A'}[wrong[0] == 'A']
	noCSRF.Set("csrf", string(wrong))
	require.Equal(t, http.StatusForbidden, c.post("/admin/rules/orders", noCSRF).status)

	// Another session's CSRF token does not work in this one.
	other := s.client()
	other.login(s.write)
	require.Equal(t, http.StatusForbidden, other.post("/admin/rules/orders", f).status)

	// A form posted from another origin is refused before anything else.
	r := c.do(http.MethodPost, "/admin/rules/orders", f, "Origin", "https://evil.example")
	require.Equal(t, http.StatusForbidden, r.status)
	r = c.do(http.MethodPost, "/admin/rules/orders", f, "Sec-Fetch-Site", "cross-site")
	require.Equal(t, http.StatusForbidden, r.status)
	r = c.do(http.MethodPost, "/admin/rules/orders", f, "Origin", "null", "Sec-Fetch-Site", "cross-site")
	require.Equal(t, http.StatusForbidden, r.status)
	r = c.do(http.MethodPost, "/admin/rules/orders", f, "Origin", s.srv.URL, "Sec-Fetch-Site", "same-site")
	require.Equal(t, http.StatusForbidden, r.status, "a sibling subdomain is not this page")
	r = c.do(http.MethodPost, "/admin/login", url.Values{"token": {s.write}}, "Origin", "http://evil.example")
	require.Equal(t, http.StatusForbidden, r.status, "no login CSRF")

	// An oversized form is refused.
	big := url.Values{"csrf": {f.Get("csrf")}, "pad": {string(make([]byte, maxForm))}}
	require.Equal(t, http.StatusBadRequest, c.post("/admin/rules/orders", big).status)
	require.Equal(t, before, s.revision(), "nothing written")

	// The same form from the page's own origin is saved (a browser under
	// Referrer-Policy no-referrer sends Origin: null with Sec-Fetch-Site).
	r = c.do(http.MethodPost, "/admin/rules/orders", f, "Origin", "null", "Sec-Fetch-Site", "same-origin")
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
}

// The page's requests count against the token's admin rate limits, as the
// admin API's do: a save beyond the write limit is refused with the
// standard headers and writes nothing; page views count as reads.
func TestAdminRateLimitsApplyToThePage(t *testing.T) {
	s := newStackWith(t, adminauth.Options{CacheTTL: -1, WritesPerMinute: 2, ReadsPerMinute: 6})
	c := s.client()
	c.login(s.write)
	for i, limit := range []string{"9", "8"} {
		f := ruleForm(t, c.get("/admin/rules/orders").body)
		f.Set("limit", limit)
		r := c.post("/admin/rules/orders", f)
		require.Equal(t, http.StatusSeeOther, r.status, "save %d", i+1)
		require.Equal(t, "2", r.header.Get("X-RateLimit-Limit"))
	}
	f := ruleForm(t, c.get("/admin/rules/orders").body)
	f.Set("limit", "7")
	before := s.revision()
	r := c.post("/admin/rules/orders", f)
	require.Equal(t, http.StatusTooManyRequests, r.status)
	require.Contains(t, r.body, "rate limit is spent")
	retry := r.header.Get("Retry-After")
	require.NotEmpty(t, retry)
	if retry == "1" {
		require.Contains(t, r.body, "retry in 1 second")
		require.NotContains(t, r.body, "1 seconds")
	} else {
		require.Contains(t, r.body, "retry in "+retry+" seconds")
	}
	require.Equal(t, "text/html; charset=utf-8", r.header.Get("Content-Type"))
	require.Equal(t, before, s.revision(), "nothing written")

	// Three pages viewed so far (one per save): three more, then refused.
	for range 3 {
		require.Equal(t, http.StatusOK, c.get("/admin/").status)
	}
	r = c.get("/admin/")
	require.Equal(t, http.StatusTooManyRequests, r.status)
	require.Equal(t, "0", r.header.Get("X-RateLimit-Remaining"))
	// Signing out needs no budget.
	require.Equal(t, http.StatusSeeOther, c.post("/admin/logout", url.Values{"csrf": {f.Get("csrf")}}).status)
}
