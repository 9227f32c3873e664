package adminui

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// shotsDirEnv names a directory the browser tests also write their
// screenshots to (PNG), for a person to look at.
const shotsDirEnv = "SLUICE_SHOTS_DIR"

// findBrowser starts a headless Chromium for t (a 1280x900 window) and
// returns its context; the browser and every process it started are gone
// when t ends.
func findBrowser(t *testing.T) context.Context {
	t.Helper()
	exe := chromium(t)
	dataDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.UserDataDir(dataDir), chromedp.DisableGPU, chromedp.WindowSize(1280, 900))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium's sandbox refuses to run as root
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
		cancel()
		if !assert.Eventually(t, func() bool { return len(processesUsing(dataDir)) == 0 },
			5*time.Second, 50*time.Millisecond, "browser processes left after the test") {
			for _, pid := range processesUsing(dataDir) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	return bctx
}

// shoot takes a full-page PNG screenshot of the browser's page, checks it
// is one, and writes it to $SLUICE_SHOTS_DIR/name.png when that is set.
func shoot(t *testing.T, bctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	require.NoError(t, err, "screenshot %s", name)
	require.True(t, bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")), "screenshot %s is a PNG", name)
	dir := os.Getenv(shotsDirEnv)
	if dir == "" {
		return
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644))
}

var requestIDRe = regexp.MustCompile(`^[0-9a-f]{32}$`)

// TestBrowserFindAndAuditDiff drives the search forms in a real headless
// Chromium: the rules searched by name and algorithm (two of six listed,
// the form keeping what was asked); a rule saved from the page, then found
// in the audit by action and target, its change shown field by field
// (limit 10 → 3, the name's before and after) with who, when and the
// request id; a time window that selects nothing; a refused filter shown
// next to the form; the callers searched by identifier prefix. No script
// is in any page. Each page is screenshotted.
func TestBrowserFindAndAuditDiff(t *testing.T) {
	s := newStack(t)
	seedRules(t, s)
	ctx := context.Background()
	for _, id := range []string{"alice", "albert", "bob"} {
		_, err := s.db.SetTier(ctx, "setup", "user", id, "gold")
		require.NoError(t, err)
	}
	bctx := findBrowser(t)
	base := s.srv.URL
	run := func(steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		require.NoError(t, chromedp.Do(bctx, steps...))
	}
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(sel)))
		require.NoError(t, err, "text of %s", sel)
		return strings.TrimSpace(v)
	}
	count := func(sel string) int {
		t.Helper()
		n, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll(`+"`"+sel+"`"+`).length`))
		require.NoError(t, err)
		return n
	}
	noScript := func() {
		t.Helper()
		require.Zero(t, count("script"), "no script in the page")
	}

	run(chromedp.Navigate(base+"/admin/login"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), s.write), chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("rule-search")))
	require.Equal(t, 6, count(`#rules tr[data-rule]`))
	shoot(t, bctx, "rules")

	// The rules searched by name (any case) and algorithm.
	run(chromedp.SendKeys(chromedp.ID("f-name"), "checkout"),
		chromedp.SetValue(chromedp.ID("f-algorithm"), "gcra"),
		chromedp.Click(chromedp.ID("search")),
		chromedp.WaitVisible(chromedp.ID("clear")))
	require.Equal(t, 2, count(`#rules tr[data-rule]`))
	require.Equal(t, 1, count(`#rules tr[data-rule="checkout-eu"]`))
	require.Equal(t, 1, count(`#rules tr[data-rule="checkout-us"]`))
	loc, err := chromedp.Run(bctx, chromedp.Location())
	require.NoError(t, err)
	u, err := url.Parse(loc)
	require.NoError(t, err)
	require.Equal(t, "checkout", u.Query().Get("name"))
	require.Equal(t, "gcra", u.Query().Get("algorithm"))
	val, err := chromedp.Run(bctx, chromedp.Value(chromedp.ID("f-name")))
	require.NoError(t, err)
	require.Equal(t, "checkout", val, "the form keeps what was asked")
	noScript()
	shoot(t, bctx, "rules-search")

	// A rule saved from the page, found in the audit, its change field by
	// field.
	run(chromedp.Click(chromedp.CSS(`tr[data-rule="checkout-eu"] a.edit`)),
		chromedp.WaitVisible(chromedp.ID("rule-form")),
		chromedp.Clear(chromedp.ID("limit")), chromedp.SendKeys(chromedp.ID("limit"), "3"),
		chromedp.Clear(chromedp.ID("name")), chromedp.SendKeys(chromedp.ID("name"), "Checkout EU (tight)"),
		chromedp.Click(chromedp.ID("save")),
		chromedp.WaitVisible(chromedp.ID("notice")))
	run(chromedp.Navigate(base+"/admin/audit"), chromedp.WaitVisible(chromedp.ID("audit-search")),
		chromedp.SendKeys(chromedp.ID("action"), "rule.update"),
		chromedp.SendKeys(chromedp.ID("target"), "rule/checkout-eu"),
		chromedp.Click(chromedp.ID("filter")),
		chromedp.WaitVisible(chromedp.ID("clear")))
	require.Equal(t, 1, count(`#audit tr[data-revision]`))
	row := `#audit tr[data-revision]`
	require.Equal(t, "alice", text(row+" td.actor"))
	require.Regexp(t, requestIDRe, text(row+" td.request"))
	at, err := time.Parse("2006-01-02 15:04:05", text(row+" td.when"))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().UTC(), at, time.Minute)
	require.Equal(t, "10", text(row+` tr[data-field="limit"] td.before`))
	require.Equal(t, "3", text(row+` tr[data-field="limit"] td.after`))
	require.Equal(t, "Checkout EU", text(row+` tr[data-field="name"] td.before`))
	require.Equal(t, "Checkout EU (tight)", text(row+` tr[data-field="name"] td.after`))
	require.Equal(t, 2, count(row+` table.diff tr`), "only the two fields changed are listed")
	noScript()
	shoot(t, bctx, "audit-diff")

	// The whole audit, newest first: the creates show every field set.
	run(chromedp.Click(chromedp.ID("clear")), chromedp.WaitVisible(chromedp.ID("audit-search")))
	require.GreaterOrEqual(t, count(`#audit tr[data-revision]`), 10)
	shoot(t, bctx, "audit")

	// A window that selects nothing, and a time the filter cannot read.
	future := time.Now().UTC().Add(time.Hour).Format("2006-01-02 15:04")
	run(chromedp.SendKeys(chromedp.ID("since"), future), chromedp.Click(chromedp.ID("filter")), chromedp.WaitVisible(chromedp.ID("clear")))
	require.Zero(t, count(`#audit tr[data-revision]`))
	require.Contains(t, text("#audit tbody"), "No entry matches these filters.")
	run(chromedp.Clear(chromedp.ID("since")), chromedp.SendKeys(chromedp.ID("since"), "yesterday"),
		chromedp.Click(chromedp.ID("filter")), chromedp.WaitVisible(chromedp.ID("error")))
	require.Contains(t, text("#error"), "since: must be a time")
	require.Contains(t, text("#audit tbody"), "Not searched")
	shoot(t, bctx, "audit-refused")

	// The callers by identifier prefix, each linked to its limits.
	run(chromedp.Navigate(base+"/admin/callers"), chromedp.WaitVisible(chromedp.ID("caller-search")),
		chromedp.SendKeys(chromedp.ID("c-identifier"), "al"),
		chromedp.Click(chromedp.ID("search")),
		chromedp.WaitVisible(chromedp.ID("clear")))
	require.Equal(t, 2, count(`#callers tr[data-caller]`))
	noScript()
	shoot(t, bctx, "callers")
	run(chromedp.Click(chromedp.CSS(`tr[data-caller="user/alice"] a`)), chromedp.WaitVisible(chromedp.ID("identifier")))
	require.Equal(t, "alice", text("#identifier"))
	require.Equal(t, "gold", text("#tier"))
}
