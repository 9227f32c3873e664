package grpclimit_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/adapters/grpclimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// Stacked unary interceptors (a global one, a per-method one) on one store
// each refund their own admission, once: a failed call is given back by
// both, exactly (the global one's unit is not given back twice), a call the
// per-method one denies is given back by the global one (its policy
// refunds failed calls). Message on a view that is not a call, or on nil,
// is ok false, never a panic.
func TestAttackStackedUnaryRefunds(t *testing.T) {
	now := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	store, err := memorystore.New(memorystore.WithClock(func() time.Time { return now }))
	require.NoError(t, err)
	defer store.Close()
	ip := keyfunc.IP()
	global, err := core.NewLimiter(store, []core.Policy{{Name: "global", Key: ip, Limit: core.PerMinute(6), Refund: core.RefundFailed}})
	require.NoError(t, err)
	login, err := core.NewLimiter(store, []core.Policy{{Name: "login", Key: ip, Limit: core.PerMinute(2), Refund: core.RefundFailed}})
	require.NoError(t, err)
	outer := grpclimit.UnaryServerInterceptor(global)
	inner := grpclimit.UnaryServerInterceptor(nil, grpclimit.WithMethodLimiter("/demo.Svc/Login", login))
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 5}})
	var ran int
	call := func(method string, fail bool) (codes.Code, string) {
		info := &grpc.UnaryServerInfo{FullMethod: method}
		var remaining string
		_, err := outer(ctx, "req", info, func(ctx context.Context, req any) (any, error) {
			return inner(ctx, req, info, func(ctx context.Context, req any) (any, error) {
				ran++
				if d, ok := grpclimit.DecisionFrom(ctx); ok {
					remaining = d.Results[0].Policy
				}
				if fail {
					return nil, status.Error(codes.Internal, "boom")
				}
				return "ok", nil
			})
		})
		return status.Code(err), remaining
	}
	for range 2 {
		c, _ := call("/demo.Svc/Other", false)
		require.Equal(t, codes.OK, c)
	}
	for i := range 5 {
		c, first := call("/demo.Svc/Login", true)
		require.Equal(t, codes.Internal, c, "failed login %d: both give it back", i)
		require.Equal(t, "global", first, "the handler sees the merge, global first")
	}
	for range 2 {
		c, _ := call("/demo.Svc/Login", false)
		require.Equal(t, codes.OK, c)
	}
	for i := range 3 {
		c, _ := call("/demo.Svc/Login", false)
		require.Equal(t, codes.ResourceExhausted, c, "login %d over the per-method limit", i)
	}
	// The global limit counted 2 + 2 calls: two more pass, then none.
	var got []codes.Code
	for range 3 {
		c, _ := call("/demo.Svc/Other", false)
		got = append(got, c)
	}
	require.Equal(t, []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted}, got, "the global limit gave back more, or less, than it counted")
	require.Equal(t, 11, ran)
	for _, r := range []keyfunc.Request{nil, &keyfunc.Static{}} {
		m, ok := grpclimit.Message(r)
		require.False(t, ok)
		require.Nil(t, m)
	}
}
