package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
)

// envoyRules is an envoyproxy/ratelimit rules file: a per-address limit and
// a per-path limit under it.
const envoyRules = `domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 3
  - key: path
    value: /checkout
    rate_limit:
      unit: minute
      requests_per_unit: 2
  - key: client
    value: banned
    rate_limit:
      unit: hour
      requests_per_unit: 0
`

func envoyRequest(addr, path string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{
		{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: addr}}},
		{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "path", Value: path}}},
	}}
}

// TestEnvoyRulesOverShouldRateLimitAndJSON: ratelimitd started on an
// envoyproxy/ratelimit rules file answers Envoy's ShouldRateLimit (through
// go-control-plane's client) on its gRPC address, all descriptors all or
// nothing, and the same decisions at /json on its HTTP address.
func TestEnvoyRulesOverShouldRateLimitAndJSON(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, path, envoyRules)
	code, out, errOut := runCmd(t, nil, "validate", path)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "valid: 3 rules")

	p := startServer(t, nil, "--rules", path)
	c := rlsv3.NewRateLimitServiceClient(p.Conn(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	var codes []rlsv3.RateLimitResponse_Code
	for range 3 {
		r, err := c.ShouldRateLimit(ctx, envoyRequest("10.0.0.1", "/checkout"))
		require.NoError(t, err)
		require.Len(t, r.GetStatuses(), 2)
		codes = append(codes, r.GetOverallCode())
	}
	require.Equal(t, []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT}, codes)
	// The third request was over the path's limit: all or nothing, so the
	// address's counter did not move: one more is left for it.
	r, err := c.ShouldRateLimit(ctx, envoyRequest("10.0.0.1", "/other"))
	require.NoError(t, err)
	require.Equal(t, rlsv3.RateLimitResponse_OK, r.GetOverallCode())
	require.Equal(t, uint32(0), r.GetStatuses()[0].GetLimitRemaining(), "3 per minute: 2 then this one")
	require.Equal(t, uint32(3), r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit())
	require.Equal(t, rlsv3.RateLimitResponse_RateLimit_MINUTE, r.GetStatuses()[0].GetCurrentLimit().GetUnit())

	// requests_per_unit: 0 (envoyproxy/ratelimit's ban list) denies.
	r, err = c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{
		{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "client", Value: "banned"}}},
	}})
	require.NoError(t, err)
	require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, r.GetOverallCode())

	// /json: the same decisions, 429 over the limit.
	post := func(body string) (int, string) {
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Post(p.URL("/json"), "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	status, body := post(`{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"}]}]}`)
	require.Equal(t, http.StatusTooManyRequests, status, body)
	require.Contains(t, body, "OVER_LIMIT")
	status, body = post(`{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.2"}]}]}`)
	require.Equal(t, http.StatusOK, status, body)
	status, _ = post(`{"domain":`)
	require.Equal(t, http.StatusBadRequest, status)

	require.Positive(t, metric(t, p, `ratelimitd_request_duration_seconds_count{api="grpc",code="OK",method="/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"}`))
}
