package main

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/rulesdb"
)

// pageClient is a browser without JavaScript: cookies kept, redirects not
// followed.
func pageClient(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &http.Client{Jar: jar, Timeout: 5 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func page(t *testing.T, c *http.Client, method, u string, form url.Values) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	require.NoError(t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

var (
	csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	etagField = regexp.MustCompile(`name="etag" value="&#34;(\d+)&#34;"`)
)

// `ratelimitd serve --db` serves the admin page: sign in with a token made
// in the database, lower a rule's limit through the edit form, and the
// check API decides under it; the throttled caller shows on /admin/recent.
func TestServeAdminPage(t *testing.T) {
	t.Parallel()
	ctx := dbctx(t)
	dsn := "file:" + filepath.Join(t.TempDir(), "rules.db")
	db, err := rulesdb.Open(ctx, dsn)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Create(ctx, "setup", ordersRule(10))
	require.NoError(t, err)
	secret, _, err := db.CreateToken(ctx, "setup", "ops", rulesdb.ScopeWrite)
	require.NoError(t, err)

	p := startServer(t, nil, "--db", dsn, "--db-poll", "50ms")
	c := pageClient(t)
	resp, _ := page(t, c, http.MethodGet, p.URL("/admin/"), nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/admin/login", resp.Header.Get("Location"))
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "default-src 'none'")
	resp, _ = page(t, c, http.MethodPost, p.URL("/admin/login"), url.Values{"token": {secret}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)

	_, body := page(t, c, http.MethodGet, p.URL("/admin/rules/orders"), nil)
	csrf, etag := csrfField.FindStringSubmatch(body), etagField.FindStringSubmatch(body)
	require.NotNil(t, csrf, body)
	require.NotNil(t, etag, body)
	resp, body = page(t, c, http.MethodPost, p.URL("/admin/rules/orders"), url.Values{
		"csrf": {csrf[1]}, "etag": {`"` + etag[1] + `"`}, "name": {"orders"}, "endpoint_pattern": {"/api/orders/**"},
		"limit": {"2"}, "window_seconds": {"3600"}, "algorithm": {"fixed_window"}, "burst": {"0"}, "enabled": {"on"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)

	hc := apiClient(t, &http.Client{Timeout: 5 * time.Second})
	require.Eventually(t, func() bool {
		limit, _ := checkHTTP(t, hc, p, "probe"+time.Now().Format("150405.000000000"))
		return limit == 2
	}, 5*time.Second, 20*time.Millisecond)
	for i, want := range []bool{true, true, false} {
		_, ok := checkHTTP(t, hc, p, "carol")
		require.Equal(t, want, ok, "check %d under the limit of 2 saved on the page", i+1)
	}
	log, err := db.Audit(ctx, 0, 100)
	require.NoError(t, err)
	require.Equal(t, "ops", log[len(log)-1].Actor)
	require.Equal(t, "rule/orders", log[len(log)-1].Target)

	_, body = page(t, c, http.MethodGet, p.URL("/admin/recent"), nil)
	require.Contains(t, body, `id=carol">carol</a>`)
	require.Contains(t, body, `<td class="state-throttled">throttled</td>`)
}

// Without --db there is no admin page.
func TestServeNoAdminPageWithoutDB(t *testing.T) {
	t.Parallel()
	p := startServer(t, nil)
	resp, _ := page(t, pageClient(t), http.MethodGet, p.URL("/admin/"), nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}
