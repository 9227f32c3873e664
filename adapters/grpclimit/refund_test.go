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

// Calls that fail are given back to a policy with RefundFailed.
func TestRefundFailedCalls(t *testing.T) {
	now := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	store, err := memorystore.New(memorystore.WithClock(func() time.Time { return now }))
	require.NoError(t, err)
	defer store.Close()
	ip := keyfunc.IP()
	l, err := core.NewLimiter(store, []core.Policy{{Name: "p", Key: ip, Limit: core.PerMinute(2), Refund: core.RefundFailed}})
	require.NoError(t, err)
	intercept := grpclimit.UnaryServerInterceptor(l)
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 5}})
	info := &grpc.UnaryServerInfo{FullMethod: "/demo.Svc/Do"}
	fail := func(context.Context, any) (any, error) { return nil, status.Error(codes.Internal, "boom") }
	ok := func(context.Context, any) (any, error) { return "ok", nil }
	for range 5 {
		_, err := intercept(ctx, nil, info, fail)
		require.Equal(t, codes.Internal, status.Code(err), "failed calls are not counted")
	}
	var got []codes.Code
	for range 3 {
		_, err := intercept(ctx, nil, info, ok)
		got = append(got, status.Code(err))
	}
	require.Equal(t, []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted}, got)
}
