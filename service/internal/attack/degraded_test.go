package attack

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/service/httpapi"
	"github.com/sluicehq/sluice/service/ratelimitv1"
)

const degradedNative = `
rules:
  - name: per-user
    dimension: user
    endpoints: [/api/**]
    algorithm: fixed_window
    rate: 5
    period: 1m
`

const degradedEnvoy = `
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
`

// degradedCase is one failure mode of the guard and what every front door
// must say under it: the name, whether the check passes, the limit stated
// (the limit applied, never 0) and whether a counter was read (else no
// remaining or reset is stated).
type degradedCase struct {
	mode    string
	option  guard.Option
	name    string
	allowed bool
	limit   int64
	counted bool
}

var degradedCases = []degradedCase{
	{mode: "open", option: guard.WithFailOpen(), name: "fail_open", allowed: true, limit: 5},
	{mode: "closed", option: guard.WithFailClosed(time.Second), name: "fail_closed", limit: 5},
	// two instances: the local limiter decides on half of 5, rounded up
	{mode: "fallback", option: guard.WithFallback(2), name: "fallback", allowed: true, limit: 3, counted: true},
}

// TestAttackDegradedEveryDoor: with the store behind the guard in each
// failure mode, and its redis-server killed or hung (SIGSTOP), every front
// door says that the limiter could not decide, by the same name, and
// states the limit applied, never 0 (the rule's when failing open or
// closed, the local share in fallback), but no remaining or reset it did
// not read: the HTTP check (body field and header, in body and status
// mode), the native CheckRateLimit, CheckRateLimitBatch, GetRemainingQuota
// and Report (the degraded field, and metadata), Envoy's ShouldRateLimit
// (a response header and dynamic metadata) and /json. Before the fault, the
// same calls say nothing of the kind. On main failing open or closed
// stated limit null (HTTP), 0 (gRPC) and no current_limit (Envoy).
func TestAttackDegradedEveryDoor(t *testing.T) {
	for _, tc := range degradedCases {
		for _, fault := range []string{"killed", "stopped"} {
			t.Run(tc.mode+"/"+fault, func(t *testing.T) {
				srv := redistest.StartServer(t)
				c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
				t.Cleanup(func() { c.Close() })
				rs, err := redisstore.New(c, redisstore.WithTimeout(500*time.Millisecond))
				require.NoError(t, err)
				g, err := guard.New(rs, guard.WithTimeout(500*time.Millisecond), tc.option)
				require.NoError(t, err)
				t.Cleanup(func() { _ = g.Close() })
				native := startStack(t, g, degradedNative)
				envoy := startStack(t, g, degradedEnvoy)

				requireDecided(t, native, envoy, "before")
				switch fault {
				case "killed":
					srv.Kill()
				case "stopped":
					pid := srv.Pid()
					require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
					t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
				}
				requireDegraded(t, native, envoy, tc)
			})
		}
	}
}

// requireDecided: every door answers a check the store decided, with no
// word of degradation.
func requireDecided(t *testing.T, native, envoy *stack, id string) {
	t.Helper()
	h, body := httpCheckRaw(t, native, "", id)
	require.Empty(t, h.Get("Sluice-Degraded"))
	require.NotContains(t, body, "degraded")
	require.EqualValues(t, 5, body["limit"])
	res := grpcCheck(t, native, id, nil)
	require.Equal(t, ratelimitv1.Degraded_DEGRADED_NONE, res.GetDegraded())
	require.EqualValues(t, 5, res.GetLimit())
	er, err := envoy.envoy.ShouldRateLimit(ctxT(t), envoyDegradedReq(id))
	require.NoError(t, err)
	require.Nil(t, er.GetDynamicMetadata())
	require.Equal(t, uint32(5), er.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit())
	for _, hv := range er.GetResponseHeadersToAdd() {
		require.NotEqual(t, "sluice-degraded", hv.GetKey())
	}
}

// requireDegraded: every door says the failure mode answered.
func requireDegraded(t *testing.T, native, envoy *stack, tc degradedCase) {
	t.Helper()
	// HTTP check, body mode and status mode.
	for _, mode := range []string{"", "status"} {
		h, body := httpCheckRaw(t, native, mode, "after-"+mode)
		require.Equal(t, tc.name, h.Get("Sluice-Degraded"), "mode %q", mode)
		require.Equal(t, tc.name, body["degraded"])
		require.Equal(t, tc.allowed, body["allowed"])
		require.Equal(t, "per-user", body["rule"])
		require.EqualValues(t, tc.limit, body["limit"], "the limit applied")
		if !tc.counted {
			require.Contains(t, body, "remaining")
			require.Nil(t, body["remaining"], "no counter was read")
			require.Nil(t, body["reset_at"])
			require.Empty(t, h.Get("RateLimit-Policy"), "its remaining would be a guess")
			require.Empty(t, h.Get("X-RateLimit-Limit"))
		} else {
			require.Contains(t, h.Get("RateLimit-Policy"), ";q="+strconv.FormatInt(tc.limit, 10)+";")
		}
		if !tc.allowed {
			require.NotEmpty(t, h.Get("Retry-After"))
			require.EqualValues(t, 1, body["retry_after"])
		}
		if mode == "status" {
			want := http.StatusOK
			if !tc.allowed {
				want = http.StatusTooManyRequests
			}
			require.Equal(t, want, h.status)
		}
	}
	// Native gRPC: every RPC that answers a CheckResponse.
	want := map[string]ratelimitv1.Degraded{"fail_open": ratelimitv1.Degraded_DEGRADED_FAIL_OPEN,
		"fail_closed": ratelimitv1.Degraded_DEGRADED_FAIL_CLOSED, "fallback": ratelimitv1.Degraded_DEGRADED_FALLBACK}[tc.name]
	check := func(what string, res *ratelimitv1.CheckResponse, md metadata.MD) {
		t.Helper()
		require.Equal(t, want, res.GetDegraded(), what)
		require.Equal(t, tc.limit, res.GetLimit(), what)
		if !tc.counted {
			require.Zero(t, res.GetRemaining(), what)
			require.Zero(t, res.GetCurrent(), what)
			require.Nil(t, res.GetResetAt(), what)
		}
		if md != nil {
			require.Equal(t, []string{tc.name}, md.Get("sluice-degraded"), what)
		}
	}
	var md metadata.MD
	res := grpcCheck(t, native, "g1", &md)
	require.Equal(t, tc.allowed, res.GetAllowed())
	check("CheckRateLimit", res, md)
	md = nil
	q, err := native.native.GetRemainingQuota(ctxT(t), &ratelimitv1.CheckRequest{Dimension: "user", Identifier: "g2", Endpoint: "/api/x"}, grpc.Header(&md))
	require.NoError(t, err)
	check("GetRemainingQuota", q, md)
	md = nil
	rp, err := native.native.Report(ctxT(t), &ratelimitv1.CheckRequest{Dimension: "user", Identifier: "g3", Endpoint: "/api/x"}, grpc.Header(&md))
	require.NoError(t, err)
	check("Report", rp, md)
	for _, aon := range []bool{false, true} {
		b, err := native.native.CheckRateLimitBatch(ctxT(t), &ratelimitv1.BatchRequest{AllOrNothing: aon, Checks: []*ratelimitv1.CheckRequest{
			{Dimension: "user", Identifier: "g4", Endpoint: "/api/x"}, {Dimension: "user", Identifier: "g5", Endpoint: "/api/y"},
		}})
		require.NoError(t, err)
		for _, r := range b.GetResults() {
			require.Nil(t, r.GetError())
			check("CheckRateLimitBatch", r.GetResponse(), nil)
		}
	}
	// Envoy: a response header and dynamic metadata; current_limit is the
	// limit applied.
	er, err := envoy.envoy.ShouldRateLimit(ctxT(t), envoyDegradedReq("e1"))
	require.NoError(t, err)
	requireEnvoyDegraded(t, er, tc)
	// /json: the same response, the header as an HTTP header.
	h, raw := postRaw(t, envoy.http+"/json", `{"domain":"edge","descriptors":[{"entries":[{"key":"user","value":"e2"}]}]}`)
	require.Equal(t, tc.name, h.Get("Sluice-Degraded"))
	var jr rlsv3.RateLimitResponse
	require.NoError(t, protojson.Unmarshal(raw, &jr), "%s", raw)
	requireEnvoyDegraded(t, &jr, tc)
	wantStatus := http.StatusOK
	if !tc.allowed {
		wantStatus = http.StatusTooManyRequests
	}
	require.Equal(t, wantStatus, h.status)
}

func requireEnvoyDegraded(t *testing.T, er *rlsv3.RateLimitResponse, tc degradedCase) {
	t.Helper()
	require.Equal(t, tc.name, er.GetDynamicMetadata().GetFields()["degraded"].GetStringValue())
	found := false
	for _, hv := range er.GetResponseHeadersToAdd() {
		if hv.GetKey() == "sluice-degraded" {
			require.Equal(t, tc.name, hv.GetValue())
			found = true
		}
	}
	require.True(t, found, "no sluice-degraded header in %v", er.GetResponseHeadersToAdd())
	st := er.GetStatuses()[0]
	wantCode := rlsv3.RateLimitResponse_OVER_LIMIT
	if tc.allowed {
		wantCode = rlsv3.RateLimitResponse_OK
	}
	require.Equal(t, wantCode, er.GetOverallCode())
	require.Equal(t, wantCode, st.GetCode())
	require.EqualValues(t, tc.limit, st.GetCurrentLimit().GetRequestsPerUnit(), "the limit applied")
	require.Equal(t, rlsv3.RateLimitResponse_RateLimit_MINUTE, st.GetCurrentLimit().GetUnit())
	switch {
	case tc.counted:
		require.EqualValues(t, tc.limit-1, st.GetLimitRemaining())
	case tc.allowed: // failing open counts nothing
		require.EqualValues(t, tc.limit, st.GetLimitRemaining())
	default:
		require.Zero(t, st.GetLimitRemaining())
	}
	if !tc.allowed {
		require.Equal(t, time.Second, st.GetDurationUntilReset().AsDuration(), "when to try again")
	}
}

func envoyDegradedReq(user string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: user}}},
	}}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func grpcCheck(t *testing.T, s *stack, id string, md *metadata.MD) *ratelimitv1.CheckResponse {
	t.Helper()
	var opts []grpc.CallOption
	if md != nil {
		opts = append(opts, grpc.Header(md))
	}
	res, err := s.native.CheckRateLimit(ctxT(t), &ratelimitv1.CheckRequest{Dimension: "user", Identifier: id, Endpoint: "/api/x"}, opts...)
	require.NoError(t, err)
	return res
}

// httpHeader is a response's header and status.
type httpHeader struct {
	http.Header
	status int
}

func httpCheckRaw(t *testing.T, s *stack, mode, id string) (httpHeader, map[string]any) {
	t.Helper()
	url := s.http + httpapi.Path
	if mode != "" {
		url += "?mode=" + mode
	}
	h, raw := postRaw(t, url, `{"key_type":"user","key_value":"`+id+`","endpoint":"/api/x"}`)
	var out map[string]any
	require.NoError(t, json.Unmarshal(raw, &out), "%s", raw)
	return h, out
}

func postRaw(t *testing.T, url, body string) (httpHeader, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return httpHeader{resp.Header, resp.StatusCode}, raw
}
