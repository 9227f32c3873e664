package attack

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/service/ratelimitv1"
)

// leaks are texts that must never reach a client: Go internals, the
// store's words.
var leaks = []string{"goroutine", "panic", "runtime error", "redis", "dial tcp", "connection refused", "sluice: ", "engine: ", "nil pointer"}

func requireNoLeak(t *testing.T, text string) {
	t.Helper()
	low := strings.ToLower(text)
	for _, l := range leaks {
		require.NotContains(t, low, l, "a client saw internal text")
	}
}

// requireInvalid asserts err is INVALID_ARGUMENT naming field (in its
// message and, when it has one, its BadRequest detail).
func requireInvalid(t *testing.T, err error, field string, msg ...any) {
	t.Helper()
	st, ok := status.FromError(err)
	require.True(t, ok, "%v %v", err, msg)
	require.Equal(t, codes.InvalidArgument, st.Code(), "%v %v", err, msg)
	require.Contains(t, st.Message(), field)
	requireNoLeak(t, st.Message())
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			var fields []string
			for _, v := range br.GetFieldViolations() {
				fields = append(fields, v.GetField())
			}
			require.Contains(t, fields, field)
		}
	}
}

// TestAttackHostileNative: hostile native requests over real gRPC are
// INVALID_ARGUMENT naming the field, change nothing, and leak nothing;
// unknown fields are ignored; extreme client times are refused.
func TestAttackHostileNative(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := startStack(t, memStore(t), oneLimit("fixed_window", 5))
	c := s.native
	ok := func() *ratelimitv1.CheckRequest {
		return &ratelimitv1.CheckRequest{Identifier: "victim", Dimension: "user", Cost: proto.Int64(1)}
	}
	cases := []struct {
		name  string
		edit  func(*ratelimitv1.CheckRequest)
		field string
	}{
		{"no identifier", func(r *ratelimitv1.CheckRequest) { r.Identifier = "" }, "identifier"},
		{"no dimension", func(r *ratelimitv1.CheckRequest) { r.Dimension = "" }, "dimension"},
		{"huge identifier", func(r *ratelimitv1.CheckRequest) { r.Identifier = strings.Repeat("x", 1<<20) }, "identifier"},
		{"huge dimension", func(r *ratelimitv1.CheckRequest) { r.Dimension = strings.Repeat("d", 4096) }, "dimension"},
		{"huge endpoint", func(r *ratelimitv1.CheckRequest) { r.Endpoint = "/" + strings.Repeat("e", 1<<16) }, "endpoint"},
		{"huge rule", func(r *ratelimitv1.CheckRequest) { r.RuleId = strings.Repeat("r", 1<<12) }, "rule_id"},
		{"unknown rule", func(r *ratelimitv1.CheckRequest) { r.RuleId = "nope" }, "rule_id"},
		{"huge idempotency key", func(r *ratelimitv1.CheckRequest) { r.IdempotencyKey = strings.Repeat("k", 1<<12) }, "idempotency_key"},
		{"negative cost", func(r *ratelimitv1.CheckRequest) { r.Cost = proto.Int64(-1) }, "cost"},
		{"min cost", func(r *ratelimitv1.CheckRequest) { r.Cost = proto.Int64(math.MinInt64) }, "cost"},
		{"time beyond range", func(r *ratelimitv1.CheckRequest) { r.ClientTime = &timestamppb.Timestamp{Seconds: math.MaxInt64} }, "client_time"},
		{"time before range", func(r *ratelimitv1.CheckRequest) { r.ClientTime = &timestamppb.Timestamp{Seconds: math.MinInt64} }, "client_time"},
		{"bad nanos", func(r *ratelimitv1.CheckRequest) { r.ClientTime = &timestamppb.Timestamp{Seconds: 1, Nanos: -1} }, "client_time"},
		{"year 1", func(r *ratelimitv1.CheckRequest) {
			r.ClientTime = timestamppb.New(time.Date(1, 1, 2, 0, 0, 0, 0, time.UTC))
		}, "client_time"},
		{"year 9999", func(r *ratelimitv1.CheckRequest) {
			r.ClientTime = timestamppb.New(time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC))
		}, "client_time"},
	}
	for _, tc := range cases {
		req := ok()
		tc.edit(req)
		_, err := c.CheckRateLimit(ctx, req)
		requireInvalid(t, err, tc.field, tc.name)
		_, err = c.Report(ctx, req)
		requireInvalid(t, err, tc.field, tc.name)
		if tc.field != "cost" {
			_, err = c.GetRemainingQuota(ctx, req)
			requireInvalid(t, err, tc.field, tc.name)
		}
		// In a batch: that check's error names its index; all or nothing
		// decides nothing.
		b, err := c.CheckRateLimitBatch(ctx, &ratelimitv1.BatchRequest{Checks: []*ratelimitv1.CheckRequest{ok(), req}, AllOrNothing: true})
		require.NoError(t, err, tc.name)
		require.Equal(t, int32(codes.InvalidArgument), b.GetResults()[1].GetError().GetCode(), tc.name)
		require.Contains(t, b.GetResults()[1].GetError().GetMessage(), "checks[1]."+strings.TrimSuffix(tc.field, "_id"), tc.name)
		require.NotNil(t, b.GetResults()[0].GetError(), "%s: a check of a refused all-or-nothing batch was decided", tc.name)
	}
	// Nothing was consumed by any of it.
	r, err := c.GetRemainingQuota(ctx, ok())
	require.NoError(t, err)
	require.Equal(t, int64(5), r.GetRemaining())

	// Unknown fields (a newer client) are ignored.
	req := ok()
	var unknown []byte
	unknown = protowire.AppendTag(unknown, 999, protowire.BytesType)
	unknown = protowire.AppendBytes(unknown, []byte("from the future"))
	unknown = protowire.AppendTag(unknown, 1000, protowire.VarintType)
	unknown = protowire.AppendVarint(unknown, math.MaxUint64)
	req.ProtoReflect().SetUnknown(unknown)
	r, err = c.CheckRateLimit(ctx, req)
	require.NoError(t, err)
	require.True(t, r.GetAllowed())
	require.Equal(t, int64(4), r.GetRemaining())

	// Batches over the bound are refused whole; at the bound they are decided.
	huge := make([]*ratelimitv1.CheckRequest, 1001)
	for i := range huge {
		huge[i] = ok()
	}
	_, err = c.CheckRateLimitBatch(ctx, &ratelimitv1.BatchRequest{Checks: huge})
	requireInvalid(t, err, "checks")
	r, err = c.GetRemainingQuota(ctx, ok())
	require.NoError(t, err)
	require.Equal(t, int64(4), r.GetRemaining())
	b, err := c.CheckRateLimitBatch(ctx, &ratelimitv1.BatchRequest{Checks: huge[:1000], AllOrNothing: true})
	require.NoError(t, err)
	for _, res := range b.GetResults() {
		require.False(t, res.GetResponse().GetAllowed(), "1000 units of a 4-unit limit admitted")
	}
	// A huge cost is denied and takes nothing.
	req = ok()
	req.Cost = proto.Int64(math.MaxInt64)
	r, err = c.CheckRateLimit(ctx, req)
	require.NoError(t, err)
	require.False(t, r.GetAllowed())
	r, err = c.GetRemainingQuota(ctx, ok())
	require.NoError(t, err)
	require.Equal(t, int64(4), r.GetRemaining())
}

// TestAttackHostileHTTP: hostile bodies to the HTTP check API and to
// Envoy's /json are 4xx problems naming the field, never 5xx, and leak
// nothing.
func TestAttackHostileHTTP(t *testing.T) {
	s := startStack(t, memStore(t), oneLimit("fixed_window", 5))
	deep := strings.Repeat("[", 30000) + strings.Repeat("]", 30000)
	bodies := []struct {
		body  string
		field string
	}{
		{`{"key_type":"user","key_value":"v","request_count":-1}`, "request_count"},
		{`{"key_type":"user","key_value":"v","request_count":1e30}`, "request_count"},
		{`{"key_type":"user","key_value":"v","request_count":1.5}`, "request_count"},
		{`{"key_type":"user","key_value":"v","request_count":"1"}`, "request_count"},
		{`{"key_type":"user","key_value":"v","request_count":NaN}`, ""},
		{`{"key_type":"user","key_value":"v","request_count":9223372036854775808}`, "request_count"},
		{`{"key_type":"user","key_value":"v","surprise":1}`, "surprise"},
		{`{"key_type":"user","key_value":` + deep + `}`, ""},
		{deep, ""},
		{`{"key_type":{"a":{"b":{}}},"key_value":"v"}`, "key_type"},
		{`{"key_type":"user","key_value":"` + strings.Repeat("x", 2000) + `"}`, "key_value"},
		{`{"key_type":"user","key_value":"v"}{"key_type":"user","key_value":"w"}`, ""},
		{`{"key_type":"user","key_value":"v","key_value":"w"}`, ""},
		{`{"key_type":"user","key_value":"\ud800"}`, ""},
		{`{"key_type":"user","key_value":"v","rule_id":"nope"}`, "rule_id"},
		{`null`, ""},
		{``, ""},
		{`{"key_type":"user","key_value":"` + strings.Repeat("x", 70<<10) + `"}`, ""},
	}
	for _, b := range bodies {
		code, out := s.post(t, "/api/v1/rate-limit/check", "application/json", []byte(b.body))
		clipped := b.body[:min(len(b.body), 80)]
		require.GreaterOrEqual(t, code, 200, clipped)
		require.Less(t, code, 500, "%s: %v", clipped, out)
		if code >= 400 {
			requireNoLeak(t, fmt.Sprint(out))
			if b.field != "" {
				require.Equal(t, b.field, out["field"], "%s: %v", clipped, out)
			}
		}
	}
	envoyBodies := []string{
		deep,
		`{"domain":"edge","descriptors":[{"entries":[{"key":"k","value":"v"}],"hits_addend":"18446744073709551615"}]}`,
		`{"domain":"edge","descriptors":[{"entries":[{"key":"k","value":"v"}],"hits_addend":-1}]}`,
		`{"domain":"edge","hits_addend":4294967296,"descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`,
		`{"domain":"","descriptors":[]}`,
		`{"domain":"edge","descriptors":[{"entries":[]}]}`,
		`{"domain":"edge","descriptors":[{"entries":[{"key":"","value":"v"}]}]}`,
		`{"domain":"edge","unknown":1}`,
		`{"domain":"edge","descriptors":[{"entries":[{"key":"k","value":"v"}],"limit":{"requests_per_unit":1000000,"unit":"SECOND"}}]}`,
	}
	for _, b := range envoyBodies {
		code, out := s.post(t, "/json", "application/json", []byte(b))
		clipped := b[:min(len(b), 80)]
		require.Less(t, code, 500, "%s: %v", clipped, out)
		requireNoLeak(t, fmt.Sprint(out))
	}
	// Nothing above consumed anything.
	code, out := s.httpCheck(t, map[string]any{"key_type": "user", "key_value": "v", "request_count": 0})
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, float64(5), out["remaining"])
}

// TestAttackHostileEnvoy: hostile ShouldRateLimit requests (huge,
// separators, NULs, invalid lengths) are INVALID_ARGUMENT or decided,
// never a failure of the server.
func TestAttackHostileEnvoy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := startStack(t, memStore(t), envoyLimit("fixed_window", 5))
	desc := func(k, v string) *ratelimitv3.RateLimitDescriptor {
		return &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: k, Value: v}}}
	}
	many := make([]*ratelimitv3.RateLimitDescriptor, 257)
	for i := range many {
		many[i] = desc("k", "v")
	}
	deepEntries := make([]*ratelimitv3.RateLimitDescriptor_Entry, 33)
	for i := range deepEntries {
		deepEntries[i] = &ratelimitv3.RateLimitDescriptor_Entry{Key: "k", Value: "v"}
	}
	for _, req := range []*rlsv3.RateLimitRequest{
		{Domain: "edge"},
		{Domain: "", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k", "v")}},
		{Domain: strings.Repeat("d", 4096), Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k", "v")}},
		{Domain: "edge", Descriptors: many},
		{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: deepEntries}}},
		{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k", strings.Repeat("v", 1<<16))}},
		{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc(strings.Repeat("k", 1<<16), "v")}},
	} {
		_, err := s.envoy.ShouldRateLimit(ctx, req)
		st, _ := status.FromError(err)
		require.Equal(t, codes.InvalidArgument, st.Code(), "%v", err)
		requireNoLeak(t, st.Message())
	}
	// An empty key, or no entries, matches no rule: OK, nothing counted,
	// as envoyproxy/ratelimit answers.
	r, err := s.envoy.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("", "v"), {}}})
	require.NoError(t, err)
	require.Equal(t, rlsv3.RateLimitResponse_OK, r.GetOverallCode())
	require.Nil(t, r.GetStatuses()[0].GetCurrentLimit())
	require.Nil(t, r.GetStatuses()[1].GetCurrentLimit())
	// Separators, escapes and NULs are values like any other: decided.
	for _, v := range []string{"|", "=", `\`, "\x00", `a\|b=c`, "\u00ff", ""} {
		r, err := s.envoy.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k", v)}})
		require.NoError(t, err, "%q", v)
		require.Equal(t, rlsv3.RateLimitResponse_OK, r.GetOverallCode())
		require.Equal(t, uint32(4), r.GetStatuses()[0].GetLimitRemaining(), "value %q shared a counter", v)
	}
}
