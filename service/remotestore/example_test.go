package remotestore_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/service/remotestore"
)

// A limiter whose store is ratelimitd: the service side (here on a memory
// store, on loopback) registers the StoreService; the app dials it and
// uses remotestore.New(conn), behind a guard, as it would any store.
func Example() {
	// The service side, as ratelimitd runs it.
	backend, _ := memorystore.New()
	defer backend.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	srv := grpc.NewServer(remotestore.ServerOptions()...)
	remotestore.NewServer(backend).Register(srv)
	go srv.Serve(ln)
	defer srv.Stop()

	// The app side: one connection, one line for the store.
	conn, _ := grpc.NewClient(ln.Addr().String(), append(remotestore.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	defer conn.Close()
	store, _ := guard.New(remotestore.New(conn), guard.WithTimeout(time.Second), guard.WithFailClosed(time.Second))
	defer store.Close()
	limiter, _ := core.NewLimiter(store, []core.Policy{{Name: "per-user", Key: keyfunc.Header("X-User"), Limit: core.PerMinute(2)}})

	for range 3 {
		r, err := limiter.Allow(context.Background(), "per-user", "alice")
		fmt.Println(r.Allowed, r.Remaining, err)
	}
	// Output:
	// true 1 <nil>
	// true 0 <nil>
	// false 0 <nil>
}
