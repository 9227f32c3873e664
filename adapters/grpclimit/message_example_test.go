package grpclimit_test

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/adapters/grpclimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// A login method limited per user name, read from the request message
// (a StringValue stands in for a generated LoginRequest): each user has 2
// attempts a minute of their own.
func ExampleMessage() {
	store, _ := memorystore.New()
	defer store.Close()
	byUser := func(r keyfunc.Request) (string, error) {
		m, _ := grpclimit.Message(r)
		return m.(*wrapperspb.StringValue).GetValue(), nil // m.(*pb.LoginRequest).GetUsername()
	}
	logins, _ := core.NewLimiter(store, []core.Policy{{Name: "login", Key: byUser, Limit: core.PerMinute(2)}})
	icpt := grpclimit.UnaryServerInterceptor(nil, grpclimit.WithMethodLimiter("/auth.Auth/Login", logins))

	info := &grpc.UnaryServerInfo{FullMethod: "/auth.Auth/Login"}
	login := func(context.Context, any) (any, error) { return wrapperspb.String("welcome"), nil }
	for _, user := range []string{"alice", "alice", "alice", "bob"} {
		_, err := icpt(context.Background(), wrapperspb.String(user), info, login)
		fmt.Println(user, status.Code(err))
	}
	// Output:
	// alice OK
	// alice OK
	// alice ResourceExhausted
	// bob OK
}
