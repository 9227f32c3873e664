package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/service/httpapi"
	"github.com/sluicehq/sluice/service/internal/browsertest"
	"github.com/sluicehq/sluice/service/internal/ratelimitdtest"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// TestFleetTrafficIsTheSum: two ratelimitd on one Redis and one rules
// database, each publishing its traffic every 200 ms; checks through each,
// and the admin page of the first shows its own counts and, for the fleet
// and for each rule, the sum of both. A real headless Chromium then opens
// the traffic pages (screenshots in $SLUICE_SHOTS_DIR when set).
func TestFleetTrafficIsTheSum(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dsn := "file:" + filepath.Join(t.TempDir(), "rules.db")
	db, err := rulesdb.Open(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	for _, r := range []rulesdb.Rule{
		{ID: "orders", Name: "Orders", Dimension: "user", EndpointPattern: "/api/orders/**", Limit: 10, WindowSeconds: 3600, Algorithm: "fixed_window", Enabled: true},
		{ID: "reports", Name: "Reports", Dimension: "user", EndpointPattern: "/api/reports/**", Limit: 5, WindowSeconds: 3600, Algorithm: "fixed_window", Shadow: true, Enabled: true},
	} {
		_, err := db.Create(ctx, "setup", r)
		require.NoError(t, err)
	}
	token, _, err := db.CreateToken(ctx, "setup", "alice", rulesdb.ScopeRead)
	require.NoError(t, err)
	var ds [2]*ratelimitdtest.Daemon
	for i := range ds {
		c, err := ratelimitdtest.Config("--db", dsn, "--redis", srv.Addr, "--traffic-publish", "200ms", "--store-timeout", "2s")
		require.NoError(t, err)
		ds[i] = ratelimitdtest.StartDaemon(t, c)
	}
	// On a: ann, 12 on orders (8 allowed, 2 warned, 2 denied). On b: bob, 7
	// on reports (4 allowed, 1 warned, 2 shadow-denied); cid, 3 on orders.
	httpChecks(t, ds[0], "ann", "/api/orders/1", 12)
	httpChecks(t, ds[1], "bob", "/api/reports/1", 7)
	httpChecks(t, ds[1], "cid", "/api/orders/1", 3)

	pc := signIn(t, ds[0], token)
	hour := regexp.MustCompile(`<tr id="hour-(here|fleet)"><td>[^<]*</td><td class="num">(\d+)</td><td class="num">(\d+)</td><td class="num">(\d+)</td><td class="num">(\d+)</td></tr>`)
	var body string
	require.Eventually(t, func() bool {
		body = get(t, pc, ds[0].URL("/admin/traffic"))
		got := map[string]string{}
		for _, m := range hour.FindAllStringSubmatch(body, -1) {
			got[m[1]] = strings.Join(m[2:], " ")
		}
		return got["here"] == "8 2 0 2" && got["fleet"] == "15 3 2 2"
	}, 20*time.Second, 100*time.Millisecond, "this instance's and the fleet's hour")
	require.Regexp(t, `<span id="instances"><span class="mono">[^<]+</span>, <span class="mono">[^<]+</span></span>`, body, "two instances published")
	require.Regexp(t, `(?s)<tr data-rule="orders">.*?<td class="num">8</td><td class="num">2</td><td class="num">0</td><td class="num">2</td>\s*`+
		`<td class="num fleet">11</td><td class="num fleet">2</td><td class="num fleet">0</td><td class="num fleet">2</td>`, body, "orders: a's, and a's and b's")
	require.Regexp(t, `(?s)<tr data-rule="reports">.*?<td class="num">0</td><td class="num">0</td><td class="num">0</td><td class="num">0</td>\s*`+
		`<td class="num fleet">4</td><td class="num fleet">1</td><td class="num fleet">2</td><td class="num fleet">0</td>`, body, "reports: b's alone")
	require.Contains(t, body, `id=ann`, "ann is throttled on a")
	rule := get(t, pc, ds[0].URL("/admin/traffic/orders"))
	require.Contains(t, rule, `<svg id="fleet-minutes"`)
	require.Contains(t, rule, "Rule orders on the fleet")

	screenshots(t, ds[0], token)
}

// httpChecks makes n checks of user on endpoint through d's HTTP API.
func httpChecks(t *testing.T, d *ratelimitdtest.Daemon, user, endpoint string, n int) {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	for range n {
		body, _ := json.Marshal(httpapi.Request{KeyType: "user", KeyValue: user, Endpoint: endpoint})
		resp, err := client.Post(d.URL(httpapi.Path), "application/json", bytes.NewReader(body))
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		require.Contains(t, []int{http.StatusOK, http.StatusTooManyRequests}, resp.StatusCode)
	}
}

// signIn returns a client signed in to d's admin page with token.
func signIn(t *testing.T, d *ratelimitdtest.Daemon, token string) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.PostForm(d.URL("/admin/login"), url.Values{"token": {token}})
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	return c
}

func get(t *testing.T, c *http.Client, u string) string {
	t.Helper()
	resp, err := c.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	return string(b)
}

// screenshots signs in to d's admin page in a headless Chromium, opens the
// traffic page, a rule's and the rules table, and screenshots each (into
// $SLUICE_SHOTS_DIR when set). The charts are in the page: no script ran
// and none is in it.
func screenshots(t *testing.T, d *ratelimitdtest.Daemon, token string) {
	exe := browsertest.Chromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.UserDataDir(t.TempDir()),
		chromedp.DisableGPU, chromedp.WindowSize(1280, 900))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancelA := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelA()
	bctx, cancelB := chromedp.NewContext(actx)
	defer cancelB()
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(d.URL("/admin/login")),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("rules"))))
	dir := os.Getenv("SLUICE_SHOTS_DIR")
	for _, p := range []struct{ path, wait, file string }{
		{"/admin/traffic", "instance-minutes", "traffic.png"},
		{"/admin/traffic/orders", "rule-seconds", "traffic-rule.png"},
		{"/admin/", "rules", "rules.png"},
	} {
		require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(d.URL(p.path)), chromedp.WaitVisible(chromedp.ID(p.wait))))
		n, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.scripts.length + document.querySelectorAll("[style]").length`))
		require.NoError(t, err)
		require.Zero(t, n, "%s: no script, no style attribute", p.path)
		if p.path != "/admin/" {
			lines, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("svg g[data-outcome] rect").length`))
			require.NoError(t, err)
			require.GreaterOrEqual(t, lines, 8, "%s: the bars of two outcomes at least", p.path)
		}
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		require.NoError(t, err)
		require.True(t, bytes.HasPrefix(png, []byte("\x89PNG")), p.path)
		if dir != "" {
			require.NoError(t, os.MkdirAll(dir, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, p.file), png, 0o644))
		}
	}
}

// TestTrafficPublishFlag: --traffic-publish is 0 (never) or at least
// 100ms; anything else is refused, naming the flag.
func TestTrafficPublishFlag(t *testing.T) {
	for _, v := range []string{"0", "100ms", "1m"} {
		_, err := ratelimitdtest.Config("--traffic-publish", v)
		require.NoError(t, err, v)
	}
	for _, v := range []string{"50ms", "-1s"} {
		_, err := ratelimitdtest.Config("--traffic-publish", v)
		require.ErrorContains(t, err, "--traffic-publish", v)
	}
}
