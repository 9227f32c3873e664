package grpcapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/grpcapi"
	"github.com/sluicehq/sluice/service/ratelimitv1"
	"github.com/sluicehq/sluice/service/rules"
)

// testRules: one rule per algorithm (5 per hour, dimension = the
// algorithm's short name) and a few for the other tests.
const testRules = `rules:
  - name: tb
    dimension: tb
    algorithm: token_bucket
    rate: 5
    period: 1h
  - name: lb
    dimension: lb
    algorithm: leaky_bucket
    rate: 5
    period: 1h
  - name: gcra
    dimension: gcra
    algorithm: gcra
    rate: 5
    period: 1h
  - name: fw
    dimension: fw
    algorithm: fixed_window
    rate: 5
    period: 1h
  - name: swl
    dimension: swl
    algorithm: sliding_window_log
    rate: 5
    period: 1h
  - name: swc
    dimension: swc
    algorithm: sliding_window_counter
    rate: 5
    period: 1h
  - name: orders
    dimension: user
    endpoints: [/api/orders]
    algorithm: sliding_window_log
    rate: 3
    period: 1h
  - name: search
    dimension: user
    endpoints: [/api/search]
    algorithm: fixed_window
    rate: 10
    period: 1h
  - name: bench
    dimension: bench
    algorithm: token_bucket
    rate: 1000000000
    period: 1s
  - name: tiered
    dimension: account
    algorithm: fixed_window
    rate: 2
    period: 1h
    tiers: {pro: {algorithm: fixed_window, rate: 4, period: 1h}}
tier_assignments:
  account: {alice: pro}
`

// harness is ratelimitd's native API over real gRPC on a loopback port.
type harness struct {
	api    *grpcapi.Server
	client ratelimitv1.RateLimitServiceClient
	conn   *grpc.ClientConn
}

func memStore(t testing.TB) core.Store {
	st, err := memorystore.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// start serves the native API on an engine over store under testRules.
func start(t testing.TB, store core.Store, opts ...grpcapi.Option) *harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	eng, err := engine.New(ctx, store, rules.NewBytes("rules.yaml", []byte(testRules)))
	require.NoError(t, err)
	go func() { _ = eng.Run(ctx) }()

	api := grpcapi.New(eng, opts...)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	api.Register(srv)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return &harness{api: api, client: ratelimitv1.NewRateLimitServiceClient(conn), conn: conn}
}

func callCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func check(dim, id string) *ratelimitv1.CheckRequest {
	return &ratelimitv1.CheckRequest{Dimension: dim, Identifier: id}
}

func withCost(r *ratelimitv1.CheckRequest, n int64) *ratelimitv1.CheckRequest {
	r.Cost = proto.Int64(n)
	return r
}

// requireInvalid asserts err is INVALID_ARGUMENT with a BadRequest naming field.
func requireInvalid(t *testing.T, err error, field string) {
	t.Helper()
	st, ok := status.FromError(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, codes.InvalidArgument, st.Code(), "%v", err)
	requireViolation(t, st, field)
}

func requireViolation(t *testing.T, st *status.Status, field string) {
	t.Helper()
	require.Equal(t, codes.InvalidArgument, st.Code(), st.Message())
	var fields []string
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				fields = append(fields, v.GetField())
			}
		}
	}
	require.Contains(t, fields, field, "violations of %q", st.Message())
	require.Contains(t, st.Message(), field)
}

// Every algorithm over the wire: five allowed with remaining counting down,
// the warning state near the limit, then a denial with retry_after and
// reset_at within the period; the metadata carries the same decision.
func TestCheckRateLimitAlgorithms(t *testing.T) {
	h := start(t, memStore(t))
	for _, alg := range []string{"tb", "lb", "gcra", "fw", "swl", "swc"} {
		t.Run(alg, func(t *testing.T) {
			ctx := callCtx(t)
			before := time.Now()
			// fresh again, and a denied check passes, within a period (two
			// for the sliding window counter, whose spent window still
			// weighs in the next)
			horizon := time.Hour
			if alg == "swc" {
				horizon = 2 * time.Hour
			}
			var states []ratelimitv1.State
			for i := range 5 {
				var hdr metadata.MD
				r, err := h.client.CheckRateLimit(ctx, check(alg, "alice"), grpc.Header(&hdr))
				require.NoError(t, err)
				require.True(t, r.GetAllowed(), "check %d", i)
				require.Equal(t, alg, r.GetRule())
				require.EqualValues(t, 5, r.GetLimit())
				require.EqualValues(t, 4-i, r.GetRemaining(), "check %d", i)
				require.EqualValues(t, i+1, r.GetCurrent(), "check %d", i)
				require.Nil(t, r.GetRetryAfter())
				require.False(t, r.GetRetryNever())
				require.NotNil(t, r.GetResetAt())
				require.False(t, r.GetResetAt().AsTime().Before(before.Add(-time.Second)))
				require.False(t, r.GetResetAt().AsTime().After(time.Now().Add(horizon+time.Second)))
				require.Equal(t, []string{"5"}, hdr.Get("x-ratelimit-limit"))
				require.Equal(t, []string{fmt.Sprint(4 - i)}, hdr.Get("x-ratelimit-remaining"))
				states = append(states, r.GetState())
			}
			require.Equal(t, ratelimitv1.State_STATE_NORMAL, states[0])
			require.Equal(t, ratelimitv1.State_STATE_WARNING, states[4])

			var hdr metadata.MD
			r, err := h.client.CheckRateLimit(ctx, check(alg, "alice"), grpc.Header(&hdr))
			require.NoError(t, err, "a denial is an answer, not an error")
			require.False(t, r.GetAllowed())
			require.Equal(t, ratelimitv1.State_STATE_THROTTLED, r.GetState())
			require.EqualValues(t, 0, r.GetRemaining())
			require.EqualValues(t, 5, r.GetCurrent())
			require.NotNil(t, r.GetRetryAfter())
			wait := r.GetRetryAfter().AsDuration()
			require.Greater(t, wait, time.Duration(0))
			require.LessOrEqual(t, wait, horizon)
			require.NotEmpty(t, hdr.Get("retry-after"))
			require.NotEmpty(t, hdr.Get("ratelimit"))

			// another identifier has its own count
			r, err = h.client.CheckRateLimit(ctx, check(alg, "bob"))
			require.NoError(t, err)
			require.True(t, r.GetAllowed())
			require.EqualValues(t, 4, r.GetRemaining())

			// a cost above the limit never passes
			r, err = h.client.CheckRateLimit(ctx, withCost(check(alg, "carol"), 6))
			require.NoError(t, err)
			require.False(t, r.GetAllowed())
			require.True(t, r.GetRetryNever())
			require.Nil(t, r.GetRetryAfter())
		})
	}
}

// A check no rule matches is allowed and counted nowhere.
func TestCheckNoRule(t *testing.T) {
	h := start(t, memStore(t))
	r, err := h.client.CheckRateLimit(callCtx(t), check("nobody", "alice"))
	require.NoError(t, err)
	require.True(t, r.GetAllowed())
	require.Empty(t, r.GetRule())
}

// Peeks (GetRemainingQuota, cost 0) consume nothing.
func TestPeek(t *testing.T) {
	h := start(t, memStore(t))
	ctx := callCtx(t)
	_, err := h.client.CheckRateLimit(ctx, withCost(check("fw", "alice"), 2))
	require.NoError(t, err)
	for range 3 {
		r, err := h.client.GetRemainingQuota(ctx, withCost(check("fw", "alice"), 5))
		require.NoError(t, err)
		require.True(t, r.GetAllowed())
		require.EqualValues(t, 3, r.GetRemaining())
		require.EqualValues(t, 2, r.GetCurrent())
		r, err = h.client.CheckRateLimit(ctx, withCost(check("fw", "alice"), 0))
		require.NoError(t, err)
		require.EqualValues(t, 3, r.GetRemaining())
	}
	r, err := h.client.CheckRateLimit(ctx, withCost(check("fw", "alice"), 3))
	require.NoError(t, err)
	require.True(t, r.GetAllowed())
	require.EqualValues(t, 0, r.GetRemaining())
}

// ResetLimit clears the identifier's counters of the matching rules only.
func TestResetLimit(t *testing.T) {
	h := start(t, memStore(t))
	ctx := callCtx(t)
	for _, id := range []string{"alice", "bob"} {
		r, err := h.client.CheckRateLimit(ctx, withCost(check("swl", id), 5))
		require.NoError(t, err)
		require.True(t, r.GetAllowed())
	}
	_, err := h.client.ResetLimit(ctx, &ratelimitv1.ResetRequest{Dimension: "swl", Identifier: "alice"})
	require.NoError(t, err)
	r, err := h.client.CheckRateLimit(ctx, check("swl", "alice"))
	require.NoError(t, err)
	require.True(t, r.GetAllowed())
	require.EqualValues(t, 4, r.GetRemaining())
	r, err = h.client.CheckRateLimit(ctx, check("swl", "bob"))
	require.NoError(t, err)
	require.False(t, r.GetAllowed(), "bob's counter is not reset")

	_, err = h.client.ResetLimit(ctx, &ratelimitv1.ResetRequest{Dimension: "swl"})
	requireInvalid(t, err, "identifier")
}

// ResetLimit runs through the Recorder, once per call, naming the
// identifier and the request; a Recorder that fails refuses it
// (UNAVAILABLE, nothing reset, the cause only logged); invalid input (no
// identifier, an unknown rule) is refused before recording or by the
// engine inside it, its error the engine's.
func TestResetLimitRecorder(t *testing.T) {
	var mu sync.Mutex
	var seen []grpcapi.Reset
	var fail error
	rec := func(ctx context.Context, r grpcapi.Reset, apply func(context.Context) error) error {
		mu.Lock()
		f := fail
		mu.Unlock()
		if f != nil {
			return f
		}
		if err := apply(ctx); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, r)
		return nil
	}
	var logs syncBuffer
	h := start(t, memStore(t), grpcapi.WithRecorder(rec), grpcapi.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	ctx := callCtx(t)
	spend := func() {
		r, err := h.client.CheckRateLimit(ctx, withCost(check("swl", "alice"), 5))
		require.NoError(t, err)
		require.True(t, r.GetAllowed())
	}
	spend()
	_, err := h.client.ResetLimit(ctx, &ratelimitv1.ResetRequest{Dimension: "swl", Identifier: "alice", Endpoint: "/x"})
	require.NoError(t, err)
	require.Len(t, seen, 1)
	require.Equal(t, "limit/swl/alice", seen[0].Target)
	b, err := json.Marshal(seen[0].After)
	require.NoError(t, err)
	require.JSONEq(t, `{"endpoint":"/x"}`, string(b))
	spend()

	_, err = h.client.ResetLimit(ctx, &ratelimitv1.ResetRequest{Dimension: "swl"})
	requireInvalid(t, err, "identifier")
	_, err = h.client.ResetLimit(ctx, &ratelimitv1.ResetRequest{Dimension: "swl", Identifier: "alice", RuleId: "admin_write"})
	requireInvalid(t, err, "rule_id")
	require.Len(t, seen, 1)

	mu.Lock()
	fail = errors.New("audit log on fire")
	mu.Unlock()
	_, err = h.client.ResetLimit(ctx, &ratelimitv1.ResetRequest{Dimension: "swl", Identifier: "alice"})
	require.Equal(t, codes.Unavailable, status.Code(err))
	require.NotContains(t, err.Error(), "fire")
	require.Contains(t, logs.String(), "audit log on fire")
	r, err := h.client.CheckRateLimit(ctx, check("swl", "alice"))
	require.NoError(t, err)
	require.False(t, r.GetAllowed(), "not reset")
}

// Report charges after the work: beyond what is left it drains to 0 and
// the next check is denied.
func TestReport(t *testing.T) {
	h := start(t, memStore(t))
	ctx := callCtx(t)
	r, err := h.client.Report(ctx, withCost(check("gcra", "alice"), 2))
	require.NoError(t, err)
	require.True(t, r.GetAllowed())
	require.EqualValues(t, 3, r.GetRemaining())
	r, err = h.client.Report(ctx, withCost(check("gcra", "alice"), 4))
	require.NoError(t, err)
	require.False(t, r.GetAllowed(), "4 did not fit in 3")
	require.EqualValues(t, 0, r.GetRemaining())
	r, err = h.client.CheckRateLimit(ctx, check("gcra", "alice"))
	require.NoError(t, err)
	require.False(t, r.GetAllowed(), "the report drained the limit")

	_, err = h.client.Report(ctx, withCost(check("gcra", "alice"), -1))
	requireInvalid(t, err, "cost")
}

// A retried check with the same idempotency key is counted once.
func TestIdempotency(t *testing.T) {
	h := start(t, memStore(t))
	ctx := callCtx(t)
	req := check("tb", "alice")
	req.IdempotencyKey = "req-1"
	for range 3 {
		r, err := h.client.CheckRateLimit(ctx, req)
		require.NoError(t, err)
		require.True(t, r.GetAllowed())
		require.EqualValues(t, 4, r.GetRemaining(), "a retry is not counted again")
	}
	req = check("tb", "alice")
	req.IdempotencyKey = "req-2"
	r, err := h.client.CheckRateLimit(ctx, req)
	require.NoError(t, err)
	require.EqualValues(t, 3, r.GetRemaining(), "another key is another call")
}

// client_time is a hint: a plausible one is accepted and changes nothing
// in the decision; an absurd or malformed one is INVALID_ARGUMENT.
func TestClientTime(t *testing.T) {
	h := start(t, memStore(t))
	ctx := callCtx(t)
	req := check("fw", "alice")
	req.ClientTime = timestamppb.New(time.Now().Add(-3 * time.Second))
	r, err := h.client.CheckRateLimit(ctx, req)
	require.NoError(t, err)
	require.True(t, r.GetAllowed())
	require.EqualValues(t, 4, r.GetRemaining())
	// the decision's clock is the server's: reset_at is not moved by the hint
	require.WithinDuration(t, time.Now().Add(time.Hour), r.GetResetAt().AsTime(), time.Hour)

	req.ClientTime = timestamppb.New(time.Now().Add(-30 * 24 * time.Hour))
	_, err = h.client.CheckRateLimit(ctx, req)
	requireInvalid(t, err, "client_time")

	req.ClientTime = &timestamppb.Timestamp{Seconds: 1, Nanos: 2_000_000_000}
	_, err = h.client.CheckRateLimit(ctx, req)
	requireInvalid(t, err, "client_time")

	r, err = h.client.GetRemainingQuota(ctx, check("fw", "alice"))
	require.NoError(t, err)
	require.EqualValues(t, 4, r.GetRemaining(), "rejected checks consumed nothing")
}

// Bad input is INVALID_ARGUMENT naming the field, and consumes nothing.
func TestBadInput(t *testing.T) {
	h := start(t, memStore(t))
	ctx := callCtx(t)
	cases := []struct {
		field string
		req   *ratelimitv1.CheckRequest
	}{
		{"identifier", &ratelimitv1.CheckRequest{Dimension: "fw"}},
		{"dimension", &ratelimitv1.CheckRequest{Identifier: "alice"}},
		{"cost", withCost(check("fw", "alice"), -3)},
		{"identifier", check("fw", strings.Repeat("x", 2000))},
		{"idempotency_key", &ratelimitv1.CheckRequest{Dimension: "fw", Identifier: "alice", IdempotencyKey: strings.Repeat("k", 300)}},
		{"rule_id", &ratelimitv1.CheckRequest{Dimension: "fw", Identifier: "alice", RuleId: "no-such-rule"}},
	}
	for _, c := range cases {
		_, err := h.client.CheckRateLimit(ctx, c.req)
		requireInvalid(t, err, c.field)
	}
	r, err := h.client.GetRemainingQuota(ctx, check("fw", "alice"))
	require.NoError(t, err)
	require.EqualValues(t, 5, r.GetRemaining())
}

// rule_id decides under that rule only.
func TestRuleID(t *testing.T) {
	h := start(t, memStore(t))
	ctx := callCtx(t)
	req := check("user", "alice")
	req.RuleId = "search"
	r, err := h.client.CheckRateLimit(ctx, req)
	require.NoError(t, err)
	require.Equal(t, "search", r.GetRule())
	require.EqualValues(t, 9, r.GetRemaining())
}

// A batch answers each check on its own: an invalid check gets its error,
// the others their decisions; all_or_nothing consumes nothing when one
// check is denied.
func TestBatch(t *testing.T) {
	h := start(t, memStore(t))
	ctx := callCtx(t)
	orders := func(id string, cost int64) *ratelimitv1.CheckRequest {
		r := withCost(check("user", id), cost)
		r.Endpoint = "/api/orders"
		return r
	}
	resp, err := h.client.CheckRateLimitBatch(ctx, &ratelimitv1.BatchRequest{Checks: []*ratelimitv1.CheckRequest{
		orders("alice", 1),
		{Dimension: "user", Endpoint: "/api/orders"}, // no identifier
		orders("bob", 5),                             // above the limit of 3
		withCost(check("lb", "alice"), 2),
	}})
	require.NoError(t, err)
	require.Len(t, resp.GetResults(), 4)
	require.True(t, resp.GetResults()[0].GetResponse().GetAllowed())
	require.EqualValues(t, 2, resp.GetResults()[0].GetResponse().GetRemaining())
	requireViolation(t, status.FromProto(resp.GetResults()[1].GetError()), "checks[1].identifier")
	require.False(t, resp.GetResults()[2].GetResponse().GetAllowed())
	require.True(t, resp.GetResults()[3].GetResponse().GetAllowed())
	require.EqualValues(t, 3, resp.GetResults()[3].GetResponse().GetRemaining())

	// all or nothing: carol's second check is denied, so her first and
	// dave's are not charged
	resp, err = h.client.CheckRateLimitBatch(ctx, &ratelimitv1.BatchRequest{AllOrNothing: true, Checks: []*ratelimitv1.CheckRequest{
		orders("carol", 2),
		withCost(check("swc", "dave"), 1),
		withCost(check("fw", "carol"), 6),
	}})
	require.NoError(t, err)
	require.Len(t, resp.GetResults(), 3)
	require.False(t, resp.GetResults()[2].GetResponse().GetAllowed())
	for _, q := range []*ratelimitv1.CheckRequest{orders("carol", 0), check("swc", "dave"), check("fw", "carol")} {
		r, err := h.client.GetRemainingQuota(ctx, q)
		require.NoError(t, err)
		require.Equal(t, r.GetLimit(), r.GetRemaining(), "nothing charged for %s", q.GetDimension())
	}

	// all or nothing with an invalid check: nothing decided
	resp, err = h.client.CheckRateLimitBatch(ctx, &ratelimitv1.BatchRequest{AllOrNothing: true, Checks: []*ratelimitv1.CheckRequest{
		orders("erin", 1),
		withCost(check("fw", "erin"), -1),
	}})
	require.NoError(t, err)
	require.Equal(t, int32(codes.Aborted), resp.GetResults()[0].GetError().GetCode())
	requireViolation(t, status.FromProto(resp.GetResults()[1].GetError()), "checks[1].cost")
	r, err := h.client.GetRemainingQuota(ctx, orders("erin", 0))
	require.NoError(t, err)
	require.EqualValues(t, 3, r.GetRemaining())

	// all or nothing with a check the engine finds invalid (an unknown
	// rule): the same, nothing decided
	unknown := check("fw", "erin")
	unknown.RuleId = "no-such-rule"
	resp, err = h.client.CheckRateLimitBatch(ctx, &ratelimitv1.BatchRequest{AllOrNothing: true, Checks: []*ratelimitv1.CheckRequest{
		orders("erin", 1), unknown,
	}})
	require.NoError(t, err)
	require.Equal(t, int32(codes.Aborted), resp.GetResults()[0].GetError().GetCode())
	requireViolation(t, status.FromProto(resp.GetResults()[1].GetError()), "checks[1].rule_id")
	r, err = h.client.GetRemainingQuota(ctx, orders("erin", 0))
	require.NoError(t, err)
	require.EqualValues(t, 3, r.GetRemaining())

	// all or nothing, all allowed: all charged
	resp, err = h.client.CheckRateLimitBatch(ctx, &ratelimitv1.BatchRequest{AllOrNothing: true, Checks: []*ratelimitv1.CheckRequest{
		orders("frank", 1), check("tb", "frank"),
	}})
	require.NoError(t, err)
	for i, res := range resp.GetResults() {
		require.True(t, res.GetResponse().GetAllowed(), "check %d", i)
	}
	r, err = h.client.GetRemainingQuota(ctx, orders("frank", 0))
	require.NoError(t, err)
	require.EqualValues(t, 2, r.GetRemaining())

	// the batch size is bounded
	small := start(t, memStore(t), grpcapi.WithMaxBatch(2))
	_, err = small.client.CheckRateLimitBatch(ctx, &ratelimitv1.BatchRequest{Checks: []*ratelimitv1.CheckRequest{
		check("tb", "a"), check("tb", "b"), check("tb", "c"),
	}})
	requireInvalid(t, err, "checks")
}

func healthOf(t *testing.T, h *harness, service string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	r, err := healthpb.NewHealthClient(h.conn).Check(callCtx(t), &healthpb.HealthCheckRequest{Service: service})
	require.NoError(t, err)
	return r.GetStatus()
}

// Health: SERVING overall only while every component is; Drain is final.
func TestHealthComponents(t *testing.T) {
	h := start(t, memStore(t))
	serving, notServing := healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_NOT_SERVING
	for _, s := range []string{"", grpcapi.ServiceName, grpcapi.ComponentStore, grpcapi.ComponentRules, grpcapi.ComponentDraining} {
		require.Equal(t, serving, healthOf(t, h, s), "%q", s)
	}
	h.api.SetComponent(grpcapi.ComponentRules, false)
	require.Equal(t, notServing, healthOf(t, h, ""))
	require.Equal(t, notServing, healthOf(t, h, grpcapi.ServiceName))
	require.Equal(t, notServing, healthOf(t, h, grpcapi.ComponentRules))
	require.Equal(t, serving, healthOf(t, h, grpcapi.ComponentStore))
	h.api.SetComponent(grpcapi.ComponentRules, true)
	require.Equal(t, serving, healthOf(t, h, ""))

	h.api.Drain()
	for _, s := range []string{"", grpcapi.ServiceName, grpcapi.ComponentStore, grpcapi.ComponentRules, grpcapi.ComponentDraining} {
		require.Equal(t, notServing, healthOf(t, h, s), "%q", s)
	}
	h.api.SetComponent(grpcapi.ComponentStore, true)
	h.api.SetComponent(grpcapi.ComponentDraining, true)
	require.Equal(t, notServing, healthOf(t, h, ""), "draining is final")
	// checks in flight and after are still answered while draining
	r, err := h.client.CheckRateLimit(callCtx(t), check("tb", "alice"))
	require.NoError(t, err)
	require.True(t, r.GetAllowed())
}

// On a real Redis: when it dies the store component (watched by a probe)
// turns NOT_SERVING and checks answer UNAVAILABLE without the store's
// error text; when it is back, both recover.
func TestStoreDown(t *testing.T) {
	srv := redistest.StartServer(t)
	client := srv.Client(t)
	store, err := redisstore.New(client)
	require.NoError(t, err)
	var logs syncBuffer
	h := start(t, store, grpcapi.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	ctx := callCtx(t)

	r, err := h.client.CheckRateLimit(ctx, check("swc", "alice"))
	require.NoError(t, err, "the server's log: %s", logs.String())
	require.True(t, r.GetAllowed())

	wctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() {
		done <- h.api.WatchComponent(wctx, grpcapi.ComponentStore, 20*time.Millisecond, func(ctx context.Context) error {
			return client.Ping(ctx).Err()
		})
	}()
	srv.Kill()
	require.Eventually(t, func() bool {
		return healthOf(t, h, "") == healthpb.HealthCheckResponse_NOT_SERVING
	}, 5*time.Second, 20*time.Millisecond)
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, healthOf(t, h, grpcapi.ComponentStore))

	_, err = h.client.CheckRateLimit(ctx, check("swc", "alice"))
	st := status.Convert(err)
	require.Equal(t, codes.Unavailable, st.Code(), "%v", err)
	require.Equal(t, "rate limit store unavailable", st.Message())
	require.NotContains(t, st.Message(), srv.Addr)
	require.Empty(t, st.Details())
	// the store's error is logged for the operator
	require.Contains(t, logs.String(), "ratelimitd: check failed")
	require.Contains(t, logs.String(), "method=CheckRateLimit")
	require.Contains(t, logs.String(), "component=store")

	srv.Restart(t)
	require.Eventually(t, func() bool {
		return healthOf(t, h, "") == healthpb.HealthCheckResponse_SERVING
	}, 10*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool {
		r, err := h.client.CheckRateLimit(ctx, check("swc", "alice"))
		return err == nil && r.GetAllowed()
	}, 10*time.Second, 50*time.Millisecond)
	stop()
	require.ErrorIs(t, <-done, context.Canceled)
}

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Server reflection lists the native API and health.
func TestReflection(t *testing.T) {
	h := start(t, memStore(t))
	stream, err := reflectionpb.NewServerReflectionClient(h.conn).ServerReflectionInfo(callCtx(t))
	require.NoError(t, err)
	require.NoError(t, stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}))
	resp, err := stream.Recv()
	require.NoError(t, err)
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	require.Contains(t, names, grpcapi.ServiceName)
	require.Contains(t, names, "grpc.health.v1.Health")

	// and the file describing it, with its fields
	require.NoError(t, stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: grpcapi.ServiceName},
	}))
	resp, err = stream.Recv()
	require.NoError(t, err)
	require.NotEmpty(t, resp.GetFileDescriptorResponse().GetFileDescriptorProto())
	require.NoError(t, stream.CloseSend())
}

// ServiceName is the generated service's name.
func TestServiceName(t *testing.T) {
	require.Equal(t, ratelimitv1.RateLimitService_ServiceDesc.ServiceName, grpcapi.ServiceName)
}

// WithoutHeaders sends no rate-limit metadata.
func TestWithoutHeaders(t *testing.T) {
	h := start(t, memStore(t), grpcapi.WithoutHeaders())
	var hdr metadata.MD
	_, err := h.client.CheckRateLimit(callCtx(t), check("tb", "alice"), grpc.Header(&hdr))
	require.NoError(t, err)
	require.Empty(t, hdr.Get("x-ratelimit-limit"))
	require.Empty(t, hdr.Get("ratelimit"))
}

// Concurrent callers over the wire never get more than the limit admitted:
// 40 checks race for 5 units of each algorithm's rule.
func TestConcurrentChecksExact(t *testing.T) {
	h := start(t, memStore(t))
	ctx := callCtx(t)
	for _, alg := range []string{"tb", "lb", "gcra", "fw", "swl", "swc"} {
		var allowed atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, 40)
		for range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 2 {
					r, err := h.client.CheckRateLimit(ctx, check(alg, "zed"))
					if err != nil {
						errs <- err
						return
					}
					if r.GetAllowed() {
						allowed.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.EqualValues(t, 5, allowed.Load(), alg)
	}
}

// A caller's tier sets the limit the response reports and enforces.
func TestTiers(t *testing.T) {
	h := start(t, memStore(t))
	ctx := callCtx(t)
	for id, limit := range map[string]int64{"alice": 4, "bob": 2} {
		for i := range limit {
			r, err := h.client.CheckRateLimit(ctx, check("account", id))
			require.NoError(t, err)
			require.True(t, r.GetAllowed(), "%s check %d", id, i)
			require.Equal(t, limit, r.GetLimit(), id)
		}
		r, err := h.client.CheckRateLimit(ctx, check("account", id))
		require.NoError(t, err)
		require.False(t, r.GetAllowed(), id)
	}
}
