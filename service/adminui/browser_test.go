package adminui

import (
	"context"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/internal/browsertest"
)

// chromium returns the path of a Chromium (or Chrome) on PATH. Without one
// the test fails under SLUICE_REQUIRE_CHROMIUM=1 and is skipped otherwise.
func chromium(t *testing.T) string { t.Helper(); return browsertest.Chromium(t) }

// processesUsing returns the pids of the processes started with the user
// data directory dir (Chromium passes --user-data-dir to every child).
func processesUsing(dir string) []int { return browsertest.ProcessesUsing(dir) }

// TestBrowserEditRuleTakesEffect drives the admin page in a real headless
// Chromium: a wrong token is refused; a write token signs in, opens the
// rules, edits a rule's limit from 10 to 2 and saves; the engine then
// denies the third check. A read token sees the rule but cannot save it,
// even from a page whose disabled form is forced open; a caller's hostile
// identifier shows as text, with no script or image in the document.
func TestBrowserEditRuleTakesEffect(t *testing.T) {
	exe := chromium(t)
	s := newStack(t)
	dataDir := t.TempDir()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.UserDataDir(dataDir), chromedp.DisableGPU, chromedp.WindowSize(1280, 900))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium's sandbox refuses to run as root
	} else {
		opts = append(opts, chromedp.Flag("no-sandbox", false))
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	closed := false
	closeBrowser := func() {
		if closed {
			return
		}
		closed = true
		cancelBrowser()
		cancelAlloc() // waits for the browser process to exit
		gone := assert.Eventually(t, func() bool { return len(processesUsing(dataDir)) == 0 },
			5*time.Second, 50*time.Millisecond, "browser processes left after the test")
		if !gone {
			for _, pid := range processesUsing(dataDir) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	defer closeBrowser()

	base := s.srv.URL
	run := func(steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		require.NoError(t, chromedp.Do(bctx, steps...))
	}
	text := func(sel chromedp.CSS) string {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Text(sel))
		require.NoError(t, err, "text of %s", sel)
		return v
	}

	// Signed out: the page sends to the sign-in form; a wrong token is refused.
	run(chromedp.Navigate(base+"/admin/"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), "slk_not-a-token"),
		chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("error")))
	require.Contains(t, text("#error"), "not valid")
	browser := chromedp.FromContext(bctx).Browser
	require.NotNil(t, browser.Process())
	pid := browser.Process().Pid

	// A write token signs in and edits the rule's limit from 10 to 2.
	run(chromedp.SendKeys(chromedp.ID("token"), s.write),
		chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("rules")))
	require.Equal(t, "alice", text("#who"))
	require.Equal(t, "10", text(`tr[data-rule="orders"] td:nth-child(6)`))
	run(chromedp.Click(chromedp.CSS(`tr[data-rule="orders"] a.edit`)),
		chromedp.WaitVisible(chromedp.ID("rule-form")),
		chromedp.Clear(chromedp.ID("limit")),
		chromedp.SendKeys(chromedp.ID("limit"), "2"),
		chromedp.Click(chromedp.ID("save")),
		chromedp.WaitVisible(chromedp.ID("notice")))
	require.Contains(t, text("#notice"), "Saved")

	stored, err := s.db.Get(ctx, "orders")
	require.NoError(t, err)
	require.EqualValues(t, 2, stored.Limit)
	waitRevision(t, s, stored.Revision)
	for i, want := range []bool{true, true, false} {
		res, err := s.eng.Check(ctx, engine.Check{Dimension: "user", Identifier: "u42", Endpoint: "/api/orders/1", Cost: 1})
		require.NoError(t, err)
		require.Equal(t, want, res.Allowed, "check %d under the new limit of 2", i+1)
	}
	run(chromedp.Navigate(base+"/admin/"), chromedp.WaitVisible(chromedp.ID("rules")))
	require.Equal(t, "2", text(`tr[data-rule="orders"] td:nth-child(6)`))
	run(chromedp.Click(chromedp.ID("logout")), chromedp.WaitVisible(chromedp.ID("token")))

	// A read token views the rule, read-only, and cannot save it even when
	// the page is tampered with to submit the disabled form.
	before := s.revision()
	run(chromedp.SendKeys(chromedp.ID("token"), s.read),
		chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("rules")),
		chromedp.Navigate(base+"/admin/rules/orders"),
		chromedp.WaitVisible(chromedp.ID("readonly")))
	saveButtons, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("#save").length`))
	require.NoError(t, err)
	require.Zero(t, saveButtons)
	_, err = chromedp.Run(bctx, chromedp.Evaluate[bool](`(() => {
		const f = document.getElementById("rule-form");
		f.querySelectorAll("[disabled]").forEach(e => e.disabled = false);
		f.querySelector("#limit").value = "1000";
		f.submit();
		return true;
	})()`))
	require.NoError(t, err)
	run(chromedp.WaitVisible(chromedp.Search(`//h1[contains(., "Forbidden")]`)))
	require.Contains(t, text("h1"), "read scope")
	require.Equal(t, before, s.revision(), "nothing written")
	got, err := s.db.Get(ctx, "orders")
	require.NoError(t, err)
	require.EqualValues(t, 2, got.Limit)

	// A hostile identifier is text in the page, not markup: no script runs
	// (an alert would block the page), none is in the document.
	run(chromedp.Navigate(base+"/admin/users?dimension=user&id="+url.QueryEscape(hostile)),
		chromedp.WaitVisible(chromedp.ID("identifier")))
	require.Equal(t, hostile, text("#identifier"))
	scripts, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.scripts.length + document.images.length`))
	require.NoError(t, err)
	require.Zero(t, scripts)

	closeBrowser()
	require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "the browser process is gone")
}
