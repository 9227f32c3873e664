package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/internal/demo"
	"github.com/sluicehq/sluice/service/internal/ratelimitdtest"
)

// binary is the ratelimitd built once by TestMain.
var binary string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "admindemo-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if binary, err = ratelimitdtest.Build(ctx, "../../../cmd/ratelimitd", dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// TestAdminDemo runs `make admin-demo`'s program (on ports the kernel
// picks) and checks what it prints: every step of the README's first way
// to run ratelimitd, on one machine with SQLite.
func TestAdminDemo(t *testing.T) {
	var out bytes.Buffer
	start := time.Now()
	err := run(context.Background(), &out, config{Bin: binary, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", Timeout: 30 * time.Second})
	require.NoError(t, err, out.String())
	require.Less(t, time.Since(start), 30*time.Second)
	s := out.String()
	t.Log(s)
	for _, want := range []string{
		"== ratelimitd token create demo-admin --scope write --db file:",
		"token (shown once, stored hashed): slk_",
		"201 Created, Location /api/v1/rules/orders, ETag \"2\"; in force here when answered\n",
		" 3  allowed  rule=orders  limit=3  remaining=0\n",
		" 4  denied   rule=orders  limit=3  remaining=0  retry_after=",
		"428 Precondition Required: If-Match: required",
		"200 OK, ETag \"3\"; in force here when answered\n",
		"412 Precondition Failed: If-Match: the rule's etag is \"3\"",
		" 5  allowed  rule=orders  limit=5  remaining=0\n",
		" 6  denied   rule=orders  limit=5  remaining=0  retry_after=",
		"201 Created; in force here when answered (everyone else stays at 5)\n",
		" 8  allowed  rule=orders  limit=8  remaining=0\n",
		" 9  denied   rule=orders  limit=8  remaining=0  retry_after=",
		"Admin page: http://127.0.0.1:",
	} {
		require.Contains(t, s, want)
	}
	for _, re := range []string{
		`(?m)^1 +\S+ +cli:\S+ +token\.create +token/demo-admin$`,
		`(?m)^2 +\S+ +demo-admin +rule\.create +rule/orders$`,
		`(?m)^3 +\S+ +demo-admin +rule\.update +rule/orders$`,
		`(?m)^4 +\S+ +demo-admin +override\.set +override/user/carol/orders$`,
		`/admin/ \(sign in with the token slk_\S+\)`,
		`(?m)^3 +\S+ +demo-admin +rule\.update +rule/orders\n     limit: 3 → 5$`,
		`/admin/audit\?target=rule%2Forders`,
		`Traffic of these checks: http://\S+/admin/traffic `,
	} {
		require.Regexp(t, re, s)
	}
	// Everything stopped and removed.
	m := regexp.MustCompile(`(?m)^ratelimitd stopped; (\S+) removed$`).FindStringSubmatch(s)
	require.NotNil(t, m, s)
	_, err = os.Stat(m[1])
	require.ErrorIs(t, err, os.ErrNotExist)
	url := regexp.MustCompile(`serving: HTTP (http://\S+) `).FindStringSubmatch(s)
	require.NotNil(t, url)
	_, err = (&http.Client{Timeout: time.Second}).Get(url[1] + "/healthz")
	require.Error(t, err, "ratelimitd must be stopped")
}

// TestAdminDemoKeep: with ADMIN_DEMO_KEEP=1 the demo leaves ratelimitd
// serving, the admin page included, until it is interrupted; then it
// stops it and succeeds.
func TestAdminDemoKeep(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	var base string
	cfg := config{Bin: binary, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", Timeout: 30 * time.Second, Keep: true,
		Kept: func(c *demo.Client) {
			base = c.Base
			// The admin page's sign-in form, and the API, are served.
			resp, err := http.Get(c.Base + "/admin/")
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Equal(t, "/admin/login", resp.Request.URL.Path)
			require.Contains(t, strings.ToLower(string(body)), "token")
			_, err = c.Expect(ctx, http.StatusOK, http.MethodGet, "/api/v1/rules/orders", nil, nil, nil)
			require.NoError(t, err)
			cancel() // Ctrl-C
		}}
	require.NoError(t, run(ctx, &out, cfg), out.String())
	require.NotEmpty(t, base, "Kept must have been called")
	require.Contains(t, out.String(), "ADMIN_DEMO_KEEP=1: serving until Ctrl-C\n")
	require.Contains(t, out.String(), "ratelimitd stopped;")
	_, err := (&http.Client{Timeout: time.Second}).Get(base + "/healthz")
	require.Error(t, err, "ratelimitd must be stopped")
}
