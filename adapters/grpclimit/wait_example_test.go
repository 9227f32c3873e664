package grpclimit_test

import (
	"log"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/adapters/grpclimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// A batch client spreads its calls over a provider's quota of 10 calls per
// second instead of failing the ones over it: each waits for its slot,
// within its own deadline.
func ExampleWithWait() {
	store, _ := memorystore.New()
	defer store.Close()
	quota, _ := core.NewLimiter(store, []core.Policy{{Name: "provider", Key: keyfunc.Const("api.example.com"), Limit: core.PerSecond(10)}})
	conn, err := grpc.NewClient("dns:///api.example.com:443",
		grpc.WithTransportCredentials(insecure.NewCredentials()), // TLS in real life
		grpc.WithChainUnaryInterceptor(grpclimit.UnaryClientInterceptor(quota, grpclimit.WithWait())),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
}
