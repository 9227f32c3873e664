package remotestore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/service/internal/badrequest"
	"github.com/sluicehq/sluice/service/ratelimitv1"
	"github.com/sluicehq/sluice/service/remotestore"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// reasonOf returns the ErrorInfo reason of an INVALID_ARGUMENT status.
func reasonOf(t *testing.T, err error) string {
	t.Helper()
	st, ok := status.FromError(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, codes.InvalidArgument, st.Code(), "%v", err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			require.Equal(t, remotestore.ErrorDomain, info.GetDomain())
			return info.GetReason()
		}
	}
	t.Fatalf("no ErrorInfo in %v", err)
	return ""
}

// What only the wire can carry (an algorithm beyond core's type, a
// Duration out of its range, more ops than MaxOps) is INVALID_ARGUMENT
// naming the op and the field, with the reason of core's sentinel, and
// consumes nothing.
func TestInvalidWireInput(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	backend := memory(t, nil)
	srv := serve(t, backend, "127.0.0.1:0")
	conn := dial(t, srv.addr)
	raw := ratelimitv1.NewStoreServiceClient(conn)
	good := func(id string) *ratelimitv1.StoreOp {
		return &ratelimitv1.StoreOp{
			Key:   &ratelimitv1.StoreKey{Identity: []byte(id), Policy: []byte("p")},
			Limit: &ratelimitv1.StoreLimit{Algorithm: ratelimitv1.StoreAlgorithm_STORE_ALGORITHM_TOKEN_BUCKET, Rate: 3, Period: durationpb.New(time.Minute)},
			Cost:  1,
		}
	}
	cases := []struct {
		name   string
		bad    func(op *ratelimitv1.StoreOp)
		reason string
		field  string // as BadRequest names it; the message in core's names
		text   string
	}{
		{"algorithm beyond uint8", func(op *ratelimitv1.StoreOp) { op.Limit.Algorithm = 257 }, "INVALID_LIMIT", "ops[1].limit.algorithm", "ops[1].Limit.Algorithm: "},
		{"unknown algorithm", func(op *ratelimitv1.StoreOp) { op.Limit.Algorithm = 42 }, "INVALID_LIMIT", "ops[1].limit.algorithm", "ops[1].Limit.Algorithm: "},
		{"period of opposite signs", func(op *ratelimitv1.StoreOp) { op.Limit.Period = &durationpb.Duration{Seconds: 1, Nanos: -5} }, "INVALID_LIMIT", "ops[1].limit.period", "ops[1].Limit.Period: "},
		{"invalid max delay", func(op *ratelimitv1.StoreOp) { op.MaxDelay = &durationpb.Duration{Nanos: 2_000_000_000} }, "INVALID_COST", "ops[1].max_delay", "ops[1].MaxDelay: "},
		{"no limit", func(op *ratelimitv1.StoreOp) { op.Limit = nil }, "INVALID_LIMIT", "ops[1].limit.algorithm", "ops[1].Limit.Algorithm: "},
		{"no key", func(op *ratelimitv1.StoreOp) { op.Key = nil }, "NO_KEY", "ops[1].key.identity", "ops[1].Key.Identity: "},
		{"negative cost", func(op *ratelimitv1.StoreOp) { op.Cost = -2 }, "INVALID_COST", "ops[1].cost", "ops[1].Cost: "},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id := "wire-" + c.name
			bad := good(id + "-bad")
			c.bad(bad)
			_, err := raw.Take(ctx, &ratelimitv1.TakeRequest{Ops: []*ratelimitv1.StoreOp{good(id), bad}})
			require.Equal(t, c.reason, reasonOf(t, err))
			require.Contains(t, status.Convert(err).Message(), c.text)
			fields := badrequest.Fields(status.Convert(err))
			require.Len(t, fields, 1)
			require.Equal(t, c.field, fields[0].Field)
			// Nothing was consumed: the good op's key is fresh.
			r, err := limitertest.TakeOne(ctx, backend, core.Key{Identity: id, Policy: "p"}, core.PerMinute(3), 0)
			require.NoError(t, err)
			require.Equal(t, int64(3), r.Remaining)
		})
	}
	ops := make([]*ratelimitv1.StoreOp, remotestore.MaxOps+1)
	for i := range ops {
		ops[i] = good("many-" + strings.Repeat("x", i%7) + string(rune('a'+i%26)))
	}
	_, err := raw.Take(ctx, &ratelimitv1.TakeRequest{Ops: ops})
	require.Equal(t, "INVALID_COST", reasonOf(t, err))
	require.Contains(t, status.Convert(err).Message(), "ops: ")
	require.Equal(t, "ops", badrequest.Fields(status.Convert(err))[0].Field)

	takes := make([]*ratelimitv1.TakeRequest, remotestore.MaxBatch+1)
	for i := range takes {
		takes[i] = &ratelimitv1.TakeRequest{}
	}
	_, err = raw.TakeBatch(ctx, &ratelimitv1.TakeBatchRequest{Takes: takes})
	require.Equal(t, "INVALID_COST", reasonOf(t, err))
	require.Contains(t, status.Convert(err).Message(), "takes: ")
	require.Equal(t, "takes", badrequest.Fields(status.Convert(err))[0].Field)

	// In a batch, a bad Take has its own error; the others are decided.
	resp, err := raw.TakeBatch(ctx, &ratelimitv1.TakeBatchRequest{Takes: []*ratelimitv1.TakeRequest{
		{Ops: []*ratelimitv1.StoreOp{good("batch-a")}},
		{Ops: []*ratelimitv1.StoreOp{good("batch-b"), good("batch-b")}},
		{Ops: []*ratelimitv1.StoreOp{good("batch-c")}},
	}})
	require.NoError(t, err)
	require.Len(t, resp.Outcomes, 3)
	require.Len(t, resp.Outcomes[0].Results, 1)
	require.True(t, resp.Outcomes[0].Results[0].Allowed)
	require.Equal(t, int32(codes.InvalidArgument), resp.Outcomes[1].Error.GetCode())
	require.Equal(t, "INVALID_COST", resp.Outcomes[1].Error.GetReason())
	require.Contains(t, resp.Outcomes[1].Error.GetMessage(), "ops[1].Key: ")
	require.Equal(t, "ops[1].key", resp.Outcomes[1].Error.GetField())
	require.NotEmpty(t, resp.Outcomes[1].Error.GetFieldDescription())
	require.Empty(t, resp.Outcomes[1].Results)
	require.Equal(t, int64(2), resp.Outcomes[2].Results[0].Remaining)

	// A Refund, Reset and SetOverride name their field without an op.
	_, err = raw.Refund(ctx, &ratelimitv1.RefundRequest{Key: good("r").Key, Limit: &ratelimitv1.StoreLimit{Algorithm: 1, Rate: 1, Period: &durationpb.Duration{Seconds: -1, Nanos: 1}}, Cost: 1, At: 1})
	require.Equal(t, "INVALID_LIMIT", reasonOf(t, err))
	require.True(t, strings.HasPrefix(status.Convert(err).Message(), "Limit.Period: "), status.Convert(err).Message())
	_, err = raw.SetOverride(ctx, &ratelimitv1.SetOverrideRequest{Key: good("o").Key})
	require.Equal(t, "INVALID_LIMIT", reasonOf(t, err))
	require.Contains(t, status.Convert(err).Message(), "Until")
	require.Equal(t, "until", badrequest.Fields(status.Convert(err))[0].Field)
}

// Through the remote store, bad input comes back wrapping core's own
// sentinel with the server's text, as a local store's would, and a guard
// passes it to the caller instead of counting a backend failure.
func TestInvalidInputKeepsItsSentinel(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	s, _ := remote(t, memory(t, nil))
	k := core.Key{Identity: "sentinel", Policy: "p"}
	out := make([]core.Result, 2)
	err := s.Take(ctx, []core.Op{{Key: k, Limit: core.PerSecond(1), Cost: 1}, {Key: k, Limit: core.PerSecond(1), Cost: 1}}, out)
	require.ErrorIs(t, err, core.ErrInvalidCost)
	require.Contains(t, err.Error(), "ops[1].Key: ")
	require.True(t, strings.HasPrefix(err.Error(), "remotestore: Take: "), err.Error())
	var fe *core.FieldError
	require.ErrorAs(t, err, &fe, "the field crosses the wire")
	require.Equal(t, "ops[1].Key", fe.Field)
	require.ErrorIs(t, fe, core.ErrInvalidCost)

	err = s.SetOverride(ctx, k, core.Override{Limit: core.PerSecond(0), Until: time.Now().Add(time.Minute)})
	require.ErrorIs(t, err, core.ErrInvalidLimit)

	// A timeout well above the call's (the guard's 5 ms default would fail
	// open on a loaded machine, and hide the error).
	gs, err := guard.New(s, guard.WithFailOpen(), guard.WithTimeout(5*time.Second))
	require.NoError(t, err)
	_, err = limitertest.TakeOne(ctx, gs, k, core.PerSecond(1), -1)
	require.ErrorIs(t, err, core.ErrInvalidCost)
	require.Zero(t, gs.Stats().Failures)
}

// A failure of the server's store reaches the client as UNAVAILABLE with a
// generic message: its text is logged by the server, never sent.
func TestStoreFailureIsNotSent(t *testing.T) {
	ctx := ctxT(t, 20*time.Second)
	var logs logBuffer
	rs, err := newRedisStore(t, redistest.StartServer(t))
	require.NoError(t, err)
	s, _ := remote(t, rs.store, remotestore.WithLogger(logs.logger()))
	k := core.Key{Identity: "failing", Policy: "p"}
	_, err = limitertest.TakeOne(ctx, s, k, core.PerSecond(5), 1)
	require.NoError(t, err)

	rs.server.Kill() // a real failure: the Redis server is gone
	_, err = limitertest.TakeOne(ctx, s, k, core.PerSecond(5), 1)
	require.ErrorIs(t, err, remotestore.ErrUnavailable)
	require.Equal(t, codes.Unavailable, status.Code(err))
	require.Equal(t, "remotestore: Take: rpc error: code = Unavailable desc = the store failed", err.Error())
	require.NotContains(t, strings.ToLower(err.Error()), "refused")
	require.NotContains(t, strings.ToLower(err.Error()), "redis")
	require.Contains(t, logs.String(), "remotestore: store call failed")
	require.Contains(t, logs.String(), "method=Take")
	for _, f := range []func() error{
		func() error { return s.Reset(ctx, k, core.PerSecond(5)) },
		func() error { return s.ClearOverride(ctx, k) },
		func() error { return s.SetOverride(ctx, k, core.Override{Until: time.Now().Add(time.Minute)}) },
		func() error {
			return s.Refund(ctx, core.Admission{Key: k, Limit: core.PerSecond(5), Cost: 1, At: time.Now().UnixMicro()})
		},
	} {
		err := f()
		require.ErrorIs(t, err, remotestore.ErrUnavailable)
		require.False(t, errors.Is(err, core.ErrInvalidLimit))
	}
}

// A closed Store answers every method with core.ErrClosed, without a call.
func TestClosed(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	s, _ := remote(t, memory(t, nil))
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	k := core.Key{Identity: "closed"}
	_, err := limitertest.TakeOne(ctx, s, k, core.PerSecond(1), 1)
	require.ErrorIs(t, err, core.ErrClosed)
	require.ErrorIs(t, s.Refund(ctx, core.Admission{Key: k, Limit: core.PerSecond(1), Cost: 1}), core.ErrClosed)
	require.ErrorIs(t, s.Reset(ctx, k, core.PerSecond(1)), core.ErrClosed)
	require.ErrorIs(t, s.SetOverride(ctx, k, core.Override{Until: time.Now().Add(time.Minute)}), core.ErrClosed)
	require.ErrorIs(t, s.ClearOverride(ctx, k), core.ErrClosed)
	require.Equal(t, guard.KindClosed, guard.Classify(err))
}

// A server that stops answering (a stalled network) is a deadline: the
// error wraps context.DeadlineExceeded, which the guard classes a timeout.
func TestStalledServerIsATimeout(t *testing.T) {
	srv := serve(t, memory(t, nil), "127.0.0.1:0")
	proxy := redistest.NewProxy(t, srv.addr)
	s := remotestore.New(dial(t, proxy.Addr))
	k := core.Key{Identity: "stalled"}
	_, err := limitertest.TakeOne(ctxT(t, 10*time.Second), s, k, core.PerSecond(1), 1)
	require.NoError(t, err)
	proxy.Stall()
	start := time.Now()
	_, err = limitertest.TakeOne(ctxT(t, 100*time.Millisecond), s, k, core.PerSecond(1), 1)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, codes.DeadlineExceeded, status.Code(err))
	require.Equal(t, guard.KindTimeout, guard.Classify(err))
	require.Less(t, time.Since(start), 2*time.Second)
	proxy.Resume()
}
