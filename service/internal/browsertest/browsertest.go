// Package browsertest starts a real headless Chromium for the admin page's
// tests (chromedp) and takes the screenshots they leave for people to look
// at.
//
// Start finds Chromium on PATH: without one a test fails under
// SLUICE_REQUIRE_CHROMIUM=1 (make test) and is skipped otherwise. The
// browser runs in a user data directory of its own, and when the test ends
// every process started with it is gone (killed if it outlived its
// context). Shot takes a full-page PNG; with SLUICE_SHOTS_DIR set it also
// writes it there, as NAME.png.
package browsertest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// RequireEnv makes a missing browser a failure (set by make test).
const RequireEnv = "SLUICE_REQUIRE_CHROMIUM"

// ShotsEnv names the directory screenshots are written to, when set.
const ShotsEnv = "SLUICE_SHOTS_DIR"

// Chromium returns the path of a Chromium (or Chrome) on PATH. Without one
// the test fails under SLUICE_REQUIRE_CHROMIUM=1 and is skipped otherwise.
func Chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("no chromium, chromium-browser or google-chrome on PATH (%s=1): run scripts/ensure-chromium.sh", RequireEnv)
	}
	t.Skipf("no chromium on PATH (scripts/ensure-chromium.sh installs it; %s=1 makes this a failure)", RequireEnv)
	return ""
}

// Browser is one headless Chromium of a test.
type Browser struct {
	// Ctx is the browser's tab: run chromedp actions on it.
	Ctx context.Context
	t   testing.TB
	dir string
	end func()
}

// Start starts a headless Chromium with a window of width by height pixels
// for at most timeout; it is closed when the test ends (or by Close).
func Start(t testing.TB, width, height int, timeout time.Duration) *Browser {
	t.Helper()
	exe := Chromium(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.UserDataDir(dir), chromedp.DisableGPU, chromedp.WindowSize(width, height))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium's sandbox refuses to run as root
	} else {
		opts = append(opts, chromedp.Flag("no-sandbox", false))
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	b := &Browser{Ctx: bctx, t: t, dir: dir}
	b.end = func() {
		cancelBrowser()
		cancelAlloc() // waits for the browser process to exit
		cancel()
		gone := assert.Eventually(t, func() bool { return len(ProcessesUsing(dir)) == 0 },
			5*time.Second, 50*time.Millisecond, "browser processes left after the test")
		if !gone {
			for _, pid := range ProcessesUsing(dir) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	t.Cleanup(b.Close)
	return b
}

// Close ends the browser and waits for its processes to be gone; later
// calls do nothing.
func (b *Browser) Close() {
	if b.end != nil {
		b.end()
		b.end = nil
	}
}

// Run runs steps in the browser, failing the test on an error.
func (b *Browser) Run(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	require.NoError(b.t, chromedp.Do(b.Ctx, steps...))
}

// Text returns the visible text of the first element sel matches.
func (b *Browser) Text(sel chromedp.CSS) string {
	b.t.Helper()
	v, err := chromedp.Run(b.Ctx, chromedp.Text(sel))
	require.NoError(b.t, err, "text of %s", sel)
	return v
}

// Shot takes a full-page PNG of the page shown and returns it; with
// SLUICE_SHOTS_DIR set it is also written there as name.png.
func (b *Browser) Shot(name string) []byte {
	b.t.Helper()
	png, err := chromedp.Run(b.Ctx, chromedp.FullScreenshot(100))
	require.NoError(b.t, err, "screenshot %s", name)
	require.True(b.t, bytes.HasPrefix(png, []byte("\x89PNG")), "screenshot %s is a PNG", name)
	if dir := os.Getenv(ShotsEnv); dir != "" {
		require.NoError(b.t, os.MkdirAll(dir, 0o755))
		require.NoError(b.t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644))
	}
	return png
}

// ProcessesUsing returns the pids of the processes started with the user
// data directory dir (Chromium passes --user-data-dir to every child).
func ProcessesUsing(dir string) []int {
	want := []byte("--user-data-dir=" + dir)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		for arg := range bytes.SplitSeq(cmdline, []byte{0}) {
			if bytes.Equal(arg, want) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}
