package grpcapi_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/sluicehq/sluice/service/ratelimitv1"
)

// Every RPC of the service is answered by the server, never by the
// generated Unimplemented fallback the server embeds for forward
// compatibility: an empty request (which decodes as any request) gets an
// answer or a validation error, not UNIMPLEMENTED.
func TestEveryMethodImplemented(t *testing.T) {
	h := start(t, memStore(t))
	desc := ratelimitv1.RateLimitService_ServiceDesc
	require.NotEmpty(t, desc.Methods)
	for _, m := range desc.Methods {
		err := h.conn.Invoke(callCtx(t), "/"+desc.ServiceName+"/"+m.MethodName, &emptypb.Empty{}, &emptypb.Empty{})
		require.NotEqual(t, codes.Unimplemented, status.Code(err), "%s: %v", m.MethodName, err)
	}
}
