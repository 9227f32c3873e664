package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/internal/daemon"
	"github.com/sluicehq/sluice/service/internal/ratelimitdtest"
	"github.com/sluicehq/sluice/service/ratelimitv1"
)

// httpGet fetches url (bounded) and returns the status and body.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	c := apiClient(t, &http.Client{Timeout: 5 * time.Second})
	resp, err := c.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// readyz reads /readyz.
func readyz(t *testing.T, p instance) (int, daemon.Readiness) {
	t.Helper()
	code, body := httpGet(t, p.URL("/readyz"))
	var r daemon.Readiness
	require.NoError(t, json.Unmarshal([]byte(body), &r), body)
	return code, r
}

// metric returns the value of the series named exactly series (name and
// labels as exposed) on /metrics, or -1 when absent.
func metric(t *testing.T, p instance, series string) float64 {
	t.Helper()
	_, body := httpGet(t, p.URL("/metrics"))
	for line := range strings.SplitSeq(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err, line)
			return f
		}
	}
	return -1
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	// Write then rename, as an editor or a config manager does: the
	// service never reads half a file.
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(content), 0o644))
	require.NoError(t, os.Rename(tmp, path))
}

func TestValidateExitCodesAndMessages(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	writeFile(t, good, "rules:\n  - name: per-user\n    dimension: user\n    limit: 10\n    window_seconds: 60\n")
	code, out, errOut := runEnv(t, nil, "validate", good)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, good+": valid: 1 rules, revision ")
	require.Empty(t, errOut)

	// The names of before are valid, with a warning naming them.
	old := filepath.Join(dir, "old.yaml")
	writeFile(t, old, "rules:\n  - name: per-user\n    dimension: user\n    rate: 10\n    period: 1m\n")
	code, out, errOut = runEnv(t, nil, "validate", old)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, old+": valid: 1 rules, revision ")
	require.Contains(t, errOut, "rules file "+old+": deprecated field names, still read with the same meaning: rate (line 4) is now limit, period (line 5) is now window_seconds")

	envoy := filepath.Join(dir, "envoy.yaml")
	writeFile(t, envoy, "domain: shop\ndescriptors:\n  - key: remote_address\n    rate_limit:\n      unit: minute\n      requests_per_unit: 5\n")
	code, out, errOut = runEnv(t, nil, "validate", envoy)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "valid: 1 rules")

	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, "rules:\n  - name: per-user\n    dimension: user\n    rate: -1\n    period: 1m\n    colour: blue\n")
	code, out, errOut = runEnv(t, nil, "validate", bad)
	require.Equal(t, 1, code)
	require.Empty(t, out)
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	require.Len(t, lines, 2, errOut)
	// One "file:line:field: message" per line, every error of the file.
	re := regexp.MustCompile(`^` + regexp.QuoteMeta(bad) + `:\d+: rules\[0\]\.[a-z_]+: .+`)
	for _, l := range lines {
		require.Regexp(t, re, l)
	}
	require.Contains(t, errOut, bad+":4: rules[0].rate: ")
	require.Contains(t, errOut, bad+":6: rules[0].colour: unknown field")

	code, _, errOut = runEnv(t, nil, "validate", filepath.Join(dir, "missing.yaml"))
	require.Equal(t, 1, code)
	require.Equal(t, filepath.Join(dir, "missing.yaml")+": no such file or directory\n", errOut)

	code, _, errOut = runEnv(t, nil, "validate")
	require.Equal(t, 2, code, "no file is a usage error")
	require.Contains(t, errOut, "usage: ratelimitd validate FILE")
}

func TestServeRejectsBadFlagsAndEnvironment(t *testing.T) {
	t.Parallel()
	code, _, errOut := runEnv(t, nil, "serve", "--failure-mode", "sometimes", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--failure-mode: want open, closed or fallback")

	cmd := exec.Command(bin(t), "serve")
	cmd.Env = append(os.Environ(), asMain, "RATELIMITD_STORE_TIMEOUT=fast")
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "RATELIMITD_STORE_TIMEOUT")

	// A rules file that does not validate stops serve before it listens.
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, "rules:\n  - name: x\n    rate: 1\n    period: 1m\n")
	code, _, errOut = runEnv(t, nil, "serve", "--rules", bad, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "--rules: rules file "+bad+":2: rules[0].dimension: required")
	// A missing file: one prefix, naming the file once.
	missing := filepath.Join(dir, "missing.yaml")
	code, _, errOut = runEnv(t, nil, "serve", "--rules", missing, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "--rules: rules file "+missing+": no such file or directory")
	require.Equal(t, 1, strings.Count(errOut, "rules file"), errOut)
}

func TestSIGTERMDrainsThenExits(t *testing.T) {
	// Not parallel: it holds the service to a bound in time, measured
	// with no other test of the package running.
	p := ratelimitdtest.Start(t, bin(t), []string{asMain}, "--drain-delay", "1500ms", "--shutdown-timeout", "2s")
	code, r := readyz(t, p)
	require.Equal(t, http.StatusOK, code)
	require.True(t, r.Ready)
	require.Equal(t, 1.0, metric(t, p, `ratelimitd_component_up{component="serving"}`))

	start := time.Now()
	require.NoError(t, p.Signal(syscall.SIGTERM))
	// Health says NOT_SERVING at once, while the service still answers.
	require.Eventually(t, func() bool {
		code, r := readyz(t, p)
		return code == http.StatusServiceUnavailable && r.Draining && !r.Ready
	}, time.Second, 20*time.Millisecond)
	code, _ = httpGet(t, p.URL("/healthz"))
	require.Equal(t, http.StatusOK, code, "alive while draining")

	exit, err := p.Wait(5 * time.Second)
	require.NoError(t, err)
	require.Equal(t, 0, exit, p.Logs())
	took := time.Since(start)
	require.GreaterOrEqual(t, took, 1500*time.Millisecond, "the drain delay is kept")
	require.Less(t, took, 4*time.Second, "drain delay + shutdown bound")
	require.Contains(t, p.Logs(), "ratelimitd stopped")
}

func TestRulesBrokenMidRunKeepsLastGood(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	writeFile(t, path, "rules:\n  - name: per-user\n    dimension: user\n    algorithm: fixed_window\n    rate: 3\n    period: 1h\n")
	p := startServer(t, nil, "--rules", path)
	_, r := readyz(t, p)
	first := r.Revision
	require.NotEmpty(t, first)
	require.Equal(t, 1.0, metric(t, p, `ratelimitd_rules_info{revision="`+first+`"}`))

	writeFile(t, path, "rules:\n  - name: per-user\n    dimension: user\n    algorithm: fixed_window\n    rate: many\n    period: 1h\n")
	require.Eventually(t, func() bool {
		return metric(t, p, `ratelimitd_rules_reloads_total{result="error"}`) == 1
	}, 5*time.Second, 50*time.Millisecond, p.Logs())
	// The last good rules decide: 3 per hour.
	c := ratelimitv1.NewRateLimitServiceClient(p.Conn(t))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	check := func(user string) *ratelimitv1.CheckResponse {
		r, err := c.CheckRateLimit(ctx, &ratelimitv1.CheckRequest{Dimension: "user", Identifier: user})
		require.NoError(t, err)
		return r
	}
	for i := range 4 {
		r := check("ann")
		require.Equal(t, i < 3, r.GetAllowed(), "check %d", i+1)
		require.Equal(t, int64(3), r.GetLimit())
	}
	code, r := readyz(t, p)
	require.Equal(t, http.StatusOK, code, "a bad edit does not make the service unready")
	require.Equal(t, first, r.Revision, "the last good rules stay")
	require.Equal(t, 1.0, metric(t, p, `ratelimitd_rules_info{revision="`+first+`"}`))
	require.Contains(t, p.Logs(), "rules[0].rate")

	writeFile(t, path, "rules:\n  - name: per-user\n    dimension: user\n    algorithm: fixed_window\n    rate: 5\n    period: 1h\n")
	require.Eventually(t, func() bool {
		_, r := readyz(t, p)
		return r.Revision != first
	}, 5*time.Second, 50*time.Millisecond, p.Logs())
	_, r = readyz(t, p)
	require.Equal(t, 1.0, metric(t, p, `ratelimitd_rules_info{revision="`+r.Revision+`"}`))
	// The fixed file decides now: 5 per hour, the 3 counted for ann kept.
	got := check("ann")
	require.Equal(t, int64(5), got.GetLimit())
	require.True(t, got.GetAllowed())
	require.Equal(t, int64(1), got.GetRemaining())
	require.Equal(t, -1.0, metric(t, p, `ratelimitd_rules_info{revision="`+first+`"}`), "one series: the revision in force")
	require.Equal(t, 1.0, metric(t, p, `ratelimitd_rules_reloads_total{result="ok"}`))
}
