package grpcapi_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/grpcapi"
	"github.com/sluicehq/sluice/service/ratelimitv1"
	"github.com/sluicehq/sluice/service/rules"
)

// clockedServer is the native API under testRules on a memory store, both
// on the clock now.
func clockedServer(t *testing.T, now func() time.Time, opts ...engine.Option) *grpcapi.Server {
	t.Helper()
	st, err := memorystore.New(memorystore.WithClock(now))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	e, err := engine.New(context.Background(), st, rules.NewBytes("rules.yaml", []byte(testRules)), append([]engine.Option{engine.WithClock(now)}, opts...)...)
	require.NoError(t, err)
	return grpcapi.New(e)
}

// TestBatchAnswersAsCheck: each response of a batch is, message for
// message, the CheckRateLimit response of its check decided in request
// order on a twin server: admitted, denied with a retry_after (a caller
// repeated past its limit), denied with retry_never (a cost above the
// limit), peeks, tiers, decided in order and in rounds. Denied checks get
// one wait, admitted ones none.
func TestBatchAnswersAsCheck(t *testing.T) {
	at := time.Unix(1_700_000_000, 0)
	now := func() time.Time { return at }
	var checks []*ratelimitv1.CheckRequest
	for i := range 5 {
		r := withCost(check("user", "alice"), 1)
		r.Endpoint = "/api/orders"
		checks = append(checks, r, withCost(check("tb", "u"+strconv.Itoa(i%2)), 2))
	}
	checks = append(checks, withCost(check("fw", "bob"), 6), withCost(check("fw", "bob"), 0), check("account", "alice"),
		withCost(check("swc", "carol"), 5), check("swc", "carol"), check("nobody", "x"))
	for name, opts := range map[string][]engine.Option{"in order": nil, "rounds": {engine.WithBatchParallelism(4)}} {
		t.Run(name, func(t *testing.T) {
			ctx := grpc.NewContextWithServerTransportStream(context.Background(), &headerSink{})
			batch, single := clockedServer(t, now, opts...), clockedServer(t, now)
			resp, err := batch.CheckRateLimitBatch(ctx, &ratelimitv1.BatchRequest{Checks: checks})
			require.NoError(t, err)
			require.Len(t, resp.GetResults(), len(checks))
			denied := 0
			for i, c := range checks {
				want, err := single.CheckRateLimit(ctx, c)
				require.NoError(t, err)
				got := resp.GetResults()[i].GetResponse()
				require.True(t, proto.Equal(want, got), "check %d: batch %v, check %v", i, got, want)
				require.Equal(t, !got.GetAllowed(), got.GetRetryAfter() != nil || got.GetRetryNever(), "check %d: a wait when denied", i)
				require.False(t, got.GetRetryAfter() != nil && got.GetRetryNever(), "check %d: one wait", i)
				if !got.GetAllowed() {
					denied++
				}
			}
			require.Equal(t, 5, denied, "alice's 4th and 5th, bob's 6, his peek, carol's second")
		})
	}
}

// TestBatchAllocations pins what the handler allocates for a
// CheckRateLimitBatch of 100 checks of 100 callers, past protobuf's
// decoding of the request: the response, its results and one block of
// their messages, with nothing per check.
func TestBatchAllocations(t *testing.T) {
	if raceBuild {
		t.Skip("the race detector drops pooled memory at random: make test runs this pin again without it (ALLOC_PINS)")
	}
	s := grpcapi.New(newEngineT(t))
	req := &ratelimitv1.BatchRequest{}
	for k := range 100 {
		req.Checks = append(req.Checks, withCost(check("bench", "caller-"+strconv.Itoa(k)), 1))
	}
	ctx, cancel := context.WithCancel(grpc.NewContextWithServerTransportStream(context.Background(), &headerSink{}))
	defer cancel()
	var resp *ratelimitv1.BatchResponse
	allocs := testing.AllocsPerRun(50, func() {
		var err error
		if resp, err = s.CheckRateLimitBatch(ctx, req); err != nil {
			t.Fatal(err)
		}
	})
	require.Len(t, resp.GetResults(), 100)
	for i, r := range resp.GetResults() {
		require.True(t, r.GetResponse().GetAllowed(), "check %d", i)
	}
	require.LessOrEqual(t, allocs, 4.0, "allocations of a batch of 100")
}

// newEngineT is an engine under testRules on a memory store.
func newEngineT(t *testing.T) *engine.Engine {
	t.Helper()
	e, err := engine.New(context.Background(), memStore(t), rules.NewBytes("rules.yaml", []byte(testRules)))
	require.NoError(t, err)
	return e
}
