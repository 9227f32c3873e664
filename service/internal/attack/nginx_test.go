package attack

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const nginxRules = `
rules:
  - name: api-per-ip
    dimension: ip
    endpoints: [/api/**]
    algorithm: fixed_window
    rate: 3
    period: 1h
  - name: static-per-ip
    dimension: ip
    endpoints: [/static/**]
    algorithm: fixed_window
    rate: 1000
    period: 1h
`

// TestAttackNginxClientHeaders: behind the documented nginx auth_request
// setup (key in the query, endpoint from X-Original-URI), the subrequest
// carries the client's own request headers (nginx forwards them by
// default). A client adding Sluice-Request-Count: 0 (a peek), a
// Sluice-Endpoint no rule matches, or a Sluice-Rule-Id of a larger limit
// must not escape its limit.
func TestAttackNginxClientHeaders(t *testing.T) {
	s := startStack(t, memStore(t), nginxRules)
	for i, attack := range [][]string{
		{"Sluice-Request-Count", "0"},
		{"Sluice-Endpoint", "/nothing/matches"},
		{"Sluice-Rule-Id", "static-per-ip"},
		{"Sluice-Key-Value", "10.0.0.1"},
		{"Sluice-Key-Type", "user"},
	} {
		t.Run(attack[0], func(t *testing.T) {
			ip := "198.51.100." + strconv.Itoa(i+1) // one client per attack
			allowed := 0
			for range 10 {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				req, err := http.NewRequestWithContext(ctx, http.MethodGet,
					s.http+"/api/v1/rate-limit/check?mode=status&deny_status=403&key_type=ip&key_value="+ip, nil)
				require.NoError(t, err)
				req.Header.Set("X-Original-URI", "/api/v1/orders?page=1") // nginx's proxy_set_header
				req.Header.Set(attack[0], attack[1])                      // the client's, forwarded
				resp, err := http.DefaultClient.Do(req)
				cancel()
				require.NoError(t, err)
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					allowed++
				case http.StatusForbidden:
				default:
					t.Fatalf("status %d", resp.StatusCode)
				}
			}
			require.Equal(t, 3, allowed, "a client header %s: %s escaped the limit of 3", attack[0], attack[1])
		})
	}
}

// TestAttackNginxRawURI: X-Original-URI is nginx's $request_uri, raw as
// the client wrote it, while nginx matched the location on the normalized
// path (slashes merged, dot segments resolved, percent-decoded). A raw
// spelling of a limited path must be counted like the path itself.
func TestAttackNginxRawURI(t *testing.T) {
	s := startStack(t, memStore(t), nginxRules)
	for i, uri := range []string{
		"//api/v1/orders",
		"/api//v1/orders",
		"/./api/v1/orders",
		"/x/../api/v1/orders",
		"/%61pi/v1/orders",
		"/api/v1/orders/",
		"/api/v1/%2e%2e/v1/orders",
	} {
		ip := "203.0.113." + strconv.Itoa(i+1)
		allowed := 0
		for range 6 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			req, err := http.NewRequestWithContext(ctx, http.MethodGet,
				s.http+"/api/v1/rate-limit/check?mode=status&deny_status=403&key_type=ip&key_value="+ip, nil)
			require.NoError(t, err)
			req.Header.Set("X-Original-URI", uri)
			resp, err := http.DefaultClient.Do(req)
			cancel()
			require.NoError(t, err)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				allowed++
			}
		}
		require.Equal(t, 3, allowed, "X-Original-URI %q escaped the /api/** limit of 3", uri)
	}
}

// TestAttackNginxForwardedBody: an auth_request location without
// proxy_pass_request_body off forwards the client's body to the check: a
// client POSTing its own check as JSON must not choose its key or cost.
func TestAttackNginxForwardedBody(t *testing.T) {
	s := startStack(t, memStore(t), nginxRules)
	allowed := 0
	for i := range 8 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		body := `{"key_type":"ip","key_value":"10.9.9.` + strconv.Itoa(i) + `","request_count":0}`
		req, err := http.NewRequestWithContext(ctx, http.MethodPost,
			s.http+"/api/v1/rate-limit/check?mode=status&deny_status=403&key_type=ip&key_value=192.0.2.77", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Original-URI", "/api/v1/orders")
		resp, err := http.DefaultClient.Do(req)
		cancel()
		require.NoError(t, err)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			allowed++
		}
	}
	require.Equal(t, 3, allowed, "a forwarded client body chose the check")
}

// TestAttackNginxHeaderModeBody: in the header-based setup (nginx sets
// Sluice-Key-Type and Sluice-Key-Value), a forwarded client body must not
// replace the check either.
func TestAttackNginxHeaderModeBody(t *testing.T) {
	s := startStack(t, memStore(t), nginxRules)
	allowed := 0
	for i := range 8 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		body := `{"key_type":"ip","key_value":"10.8.8.` + strconv.Itoa(i) + `"}`
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.http+"/api/v1/rate-limit/check?mode=status&deny_status=403", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Sluice-Key-Type", "ip")
		req.Header.Set("Sluice-Key-Value", "192.0.2.88")
		req.Header.Set("X-Original-URI", "/api/v1/orders")
		resp, err := http.DefaultClient.Do(req)
		cancel()
		require.NoError(t, err)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			allowed++
		}
	}
	require.Equal(t, 3, allowed, "a forwarded client body chose the check")
}
