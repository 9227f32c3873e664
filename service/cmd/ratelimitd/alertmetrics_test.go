package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/service/ratelimitv1"
	"github.com/sluicehq/sluice/service/remotestore"
)

// TestAdminAuthFailuresMetric: every failed authentication of the admin
// plane is counted, whichever door it came through (the admin API, the
// admin page's sign-in, a gRPC admin call), as invalid; a client past its
// failure budget is counted as throttled; a request with no token, and a
// good token, count nothing.
func TestAdminAuthFailuresMetric(t *testing.T) {
	t.Parallel()
	dsn, write, _ := grpcTokens(t)
	p := startServer(t, nil, "--db", dsn)
	invalid := func() float64 {
		return metric(t, p, `ratelimitd_admin_auth_failures_total{reason="invalid"}`)
	}
	throttled := func() float64 {
		return metric(t, p, `ratelimitd_admin_auth_failures_total{reason="throttled"}`)
	}
	require.Zero(t, invalid(), "exposed at 0 before the first failure")
	require.Zero(t, throttled())
	hc := &http.Client{Timeout: 5 * time.Second}

	require.Equal(t, http.StatusOK, adminCall(t, hc, p, write, "GET", "/api/v1/rules", "").status)
	require.Equal(t, http.StatusUnauthorized, adminCall(t, hc, p, "", "GET", "/api/v1/rules", "").status)
	require.Zero(t, invalid(), "a good token and no token are no failed authentication")

	require.Equal(t, http.StatusUnauthorized, adminCall(t, hc, p, "slk_wrong1", "GET", "/api/v1/rules", "").status)
	require.Equal(t, 1.0, invalid(), "the admin API")

	resp, _ := page(t, pageClient(t), "POST", p.URL("/admin/login"), url.Values{"token": {"slk_wrong2"}})
	require.NotEqual(t, http.StatusSeeOther, resp.StatusCode, "not signed in")
	require.Equal(t, 2.0, invalid(), "the admin page's sign-in")

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client := ratelimitv1.NewRateLimitServiceClient(p.Conn(t))
	reset := &ratelimitv1.ResetRequest{Dimension: "user", Identifier: "ann", Endpoint: "/api/orders"}
	_, err := client.ResetLimit(ctx, reset, grpc.PerRPCCredentials(remotestore.InsecureTokenCredentials("slk_wrong3")))
	require.Equal(t, codes.Unauthenticated, status.Code(err))
	require.Equal(t, 3.0, invalid(), "a gRPC admin call")
	require.Zero(t, throttled())

	// Guessing: past the client's budget (20 failures a minute) new
	// secrets are refused unread.
	codes := map[int]int{}
	for i := range 30 {
		codes[adminCall(t, hc, p, fmt.Sprintf("slk_guess%d", i), "GET", "/api/v1/rules", "").status]++
	}
	require.Positive(t, codes[http.StatusTooManyRequests], "%v", codes)
	require.Equal(t, float64(codes[http.StatusTooManyRequests]), throttled(), "%v", codes)
	require.Equal(t, 3.0+float64(codes[http.StatusUnauthorized]), invalid(), "%v", codes)
}

// TestRulesLastReloadSuccessfulMetric: the gauge is 1 with the rules in
// force, 0 from a refused edit, and 1 again once the file is good, whether
// fixed with new content or put back as it was (the rules in force).
func TestRulesLastReloadSuccessfulMetric(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	good := "rules:\n  - name: per-user\n    dimension: user\n    algorithm: fixed_window\n    rate: 3\n    period: 1h\n"
	writeFile(t, path, good)
	p := startServer(t, nil, "--rules", path, "--rules-poll", "20ms")
	const series = "ratelimitd_rules_last_reload_successful"
	require.Equal(t, 1.0, metric(t, p, series))
	gauge := func(want float64) {
		t.Helper()
		require.Eventually(t, func() bool { return metric(t, p, series) == want }, 5*time.Second, 20*time.Millisecond, p.Logs())
	}

	writeFile(t, path, "rules:\n  - name: per-user\n    rate: many\n")
	gauge(0)
	writeFile(t, path, good) // undone: the rules in force
	gauge(1)

	writeFile(t, path, "rules: [")
	gauge(0)
	writeFile(t, path, "rules:\n  - name: per-user\n    dimension: user\n    algorithm: fixed_window\n    rate: 5\n    period: 1h\n")
	gauge(1)
	require.Equal(t, 2.0, metric(t, p, `ratelimitd_rules_reloads_total{result="error"}`))
}
