package remotestore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/ratelimitv1"
)

// Every RPC of the store service is answered by the server, never by the
// generated Unimplemented fallback it embeds: an empty request gets an
// answer or INVALID_ARGUMENT, not UNIMPLEMENTED.
func TestEveryMethodImplemented(t *testing.T) {
	st, err := memorystore.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	s := serve(t, st, "127.0.0.1:0")
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	desc := ratelimitv1.StoreService_ServiceDesc
	require.NotEmpty(t, desc.Methods)
	for _, m := range desc.Methods {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := conn.Invoke(ctx, "/"+desc.ServiceName+"/"+m.MethodName, &emptypb.Empty{}, &emptypb.Empty{})
		cancel()
		require.NotEqual(t, codes.Unimplemented, status.Code(err), "%s: %v", m.MethodName, err)
	}
}
